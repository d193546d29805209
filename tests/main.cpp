// tests/main.cpp: the doctest runner shared by the edgefl test executables.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
