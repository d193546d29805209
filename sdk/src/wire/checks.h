// Internal: the field rules of the wire protocol, shared by validate() (on the plain structs)
// and decode() (the few rules that must hold before a FlatBuffer field is copied into a struct:
// fixed-length ids and digests, a present training table).
#ifndef EDGEFL_SRC_WIRE_CHECKS_H_
#define EDGEFL_SRC_WIRE_CHECKS_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl {
namespace wire {
namespace internal {

// Records (violation, field) in *detail when detail is not null; returns kInvalidMessage.
Status fail(DecodeDetail* detail, Violation violation, const char* field);

// A fixed-length byte string on the wire (upload id, digest): `size` must equal `expected`.
// `present` is false when the FlatBuffer omits the field.
Status check_fixed_length(bool present, size_t size, size_t expected, DecodeDetail* detail,
                          const char* field);

// The rules of each message (validate() without the variant). *detail is written on failure only.
Status check_message(const Hello& m, DecodeDetail* detail);
Status check_message(const TaskOffer& m, DecodeDetail* detail);
Status check_message(const RetryLater& m, DecodeDetail* detail);
Status check_message(const ModelRequest& m, DecodeDetail* detail);
Status check_message(const ModelChunk& m, DecodeDetail* detail);
Status check_message(const UploadStart& m, DecodeDetail* detail);
Status check_message(const UploadStatus& m, DecodeDetail* detail);
Status check_message(const UploadChunk& m, DecodeDetail* detail);
Status check_message(const Commit& m, DecodeDetail* detail);
Status check_message(const Ack& m, DecodeDetail* detail);
Status check_message(const Error& m, DecodeDetail* detail);
Status check_message(const SecAggAdvertise& m, DecodeDetail* detail);
Status check_message(const SecAggKeys& m, DecodeDetail* detail);
Status check_message(const SecAggShares& m, DecodeDetail* detail);
Status check_message(const SecAggInbox& m, DecodeDetail* detail);
Status check_message(const SecAggPoll& m, DecodeDetail* detail);
Status check_message(const SecAggStatus& m, DecodeDetail* detail);
Status check_message(const SecAggUnmaskRequest& m, DecodeDetail* detail);
Status check_message(const SecAggUnmaskResponse& m, DecodeDetail* detail);

}  // namespace internal
}  // namespace wire
}  // namespace edgefl

#endif  // EDGEFL_SRC_WIRE_CHECKS_H_
