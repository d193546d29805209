// edgefl-server: federated rounds over mutual TLS. `edgefl-server --help` lists the options.
#include <string>
#include <vector>

#include "command_line.h"

int main(int argc, char** argv) {
  return edgefl::server::server_main(std::vector<std::string>(argv + 1, argv + argc));
}
