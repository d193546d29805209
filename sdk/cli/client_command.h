// client_command.h: `edgefl client`, one device taking part in federated rounds against
// edgefl-server over mutual TLS, training on its own shard of Fashion-MNIST.
#ifndef EDGEFL_CLI_CLIENT_COMMAND_H_
#define EDGEFL_CLI_CLIENT_COMMAND_H_

#include <ostream>

namespace edgefl {
namespace cli {

// The command line of `edgefl client` (argv[0] = "edgefl", argv[1] = "client").
int run_client_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// `edgefl swarm`: N devices as threads of one process, each with its own certificate and TLS
// connection, training nothing (a seeded random update): load tests of edgefl-server.
int run_swarm_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_CLIENT_COMMAND_H_
