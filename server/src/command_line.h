// command_line.h: edgefl-server's command line as a library function, so that a deployment can
// build its own server binary with the same options plus its own parts (today: an evaluator of
// its model, evaluator.h), e.g. examples/pytorch/torch_server.cpp.
#ifndef EDGEFL_SERVER_COMMAND_LINE_H_
#define EDGEFL_SERVER_COMMAND_LINE_H_

#include <memory>
#include <string>
#include <vector>

#include "evaluator.h"

namespace edgefl::server {

struct ServerCustomization {
  std::string program;      // in error messages ("edgefl-server")
  std::string extra_usage;  // appended to --help
  // Evaluates every new model version instead of --eval (which is then refused).
  std::shared_ptr<ModelEvaluator> evaluator;
  std::string evaluator_name;  // the option that chose it, for messages
};

// Parses `args` (argv without the program name) as edgefl-server does, then runs the server until
// it finishes. Returns the process exit status: 0 after the last round or --help, 2 for a bad
// command line (with the reason on stderr), 1 when the server fails.
int server_main(const std::vector<std::string>& args, const ServerCustomization& custom = {});

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_COMMAND_LINE_H_
