// edgefl: the command-line tool (encode, decode, inspect, add, bench). See `edgefl --help`.
#include <exception>
#include <iostream>
#include <new>

#include "commands.h"

int main(int argc, char** argv) {
  try {
    return edgefl::cli::run_cli(argc, argv, std::cout, std::cerr);
  } catch (const std::bad_alloc&) {
    std::cerr << "edgefl: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "edgefl: internal error: " << e.what() << "\n";
  }
  return edgefl::cli::kExitFailure;
}
