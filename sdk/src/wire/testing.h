// Internal, for tests and fuzzers only: encoding that skips the field rules, so that a test can
// put a message that breaks one rule on the wire and check that decode() refuses it with the
// same Violation that validate() reports. The payload cap still holds (kFrameTooLarge).
#ifndef EDGEFL_SRC_WIRE_TESTING_H_
#define EDGEFL_SRC_WIRE_TESTING_H_

#include <stdint.h>

#include <vector>

#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {
namespace testing {

[[nodiscard]] Status encode_unchecked(const Message& message, std::vector<uint8_t>* frame);

}  // namespace testing
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_TESTING_H_
