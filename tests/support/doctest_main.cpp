// tests/support/doctest_main.cpp: doctest's implementation and main(), compiled once into
// edgefl_doctest_main (tests/CMakeLists.txt) and linked into every suite through doctest::doctest.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
