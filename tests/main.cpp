// tests/main.cpp: listed by every suite's executable, and empty on purpose. doctest's
// implementation and main() (tests/support/doctest_main.cpp) take longer to compile than most
// suites, so they are compiled once, into edgefl_doctest_main, which every target linking
// doctest::doctest links too (tests/CMakeLists.txt).
