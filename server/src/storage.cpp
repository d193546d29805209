// storage.cpp: the parts of storage.h shared by every implementation.
#include "storage.h"

namespace edgefl {
namespace server {

const char* round_state_name(RoundState state) {
  switch (state) {
    case RoundState::kOpen: return "open";
    case RoundState::kCommitted: return "committed";
    case RoundState::kAbandoned: return "abandoned";
  }
  return "unknown";
}

}  // namespace server
}  // namespace edgefl
