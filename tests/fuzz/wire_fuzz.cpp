// tests/fuzz/wire_fuzz.cpp: libFuzzer target for the wire protocol (edgefl/wire.h).
//
// The input is read as a frame. Properties, each a crash when broken:
//  1. read_frame_header() and decode() return a status for any bytes (ASan and UBSan watch them).
//  2. The payload is decoded twice: as the frame says (decode_frame: exact length), and with the
//     header's length replaced by the bytes actually present, so that the fuzzer explores payloads
//     without having to keep the length field in step.
//  3. A decoded message is valid, re-encodes, decodes to itself, and re-encodes to the same bytes.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace {

namespace w = edgefl::wire;
using edgefl::Status;

[[noreturn]] void fail(const char* what, Status s) {
  fprintf(stderr, "wire_fuzz: %s (%s)\n", what, edgefl::status_name(s));
  abort();
}

void check_decoded(const w::Message& message) {
  Status s = w::validate(message);
  if (s != Status::kOk) fail("a decoded message does not validate", s);
  std::vector<uint8_t> frame;
  s = w::encode(message, &frame);
  if (s != Status::kOk) fail("a decoded message does not encode", s);
  w::Message again;
  s = w::decode_frame({frame.data(), frame.size()}, &again);
  if (s != Status::kOk) fail("a re-encoded message does not decode", s);
  if (!(again == message)) fail("a re-encoded message decodes to another message", s);
  std::vector<uint8_t> frame2;
  s = w::encode(again, &frame2);
  if (s != Status::kOk || frame2 != frame) fail("encoding is not deterministic", s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const edgefl::Span<const uint8_t> input(data, size);
  w::FrameHeader header;
  if (w::read_frame_header(input, &header) != Status::kOk) return 0;

  w::Message message;
  w::DecodeDetail detail;
  if (w::decode_frame(input, &message, &detail) == Status::kOk) check_decoded(message);

  const size_t present = size - w::kFrameHeaderBytes;
  if (present != header.payload_length && present >= w::kMinPayloadBytes &&
      present <= w::max_payload_bytes(header.type)) {
    header.payload_length = static_cast<uint32_t>(present);
    if (w::decode(header, input.subspan(w::kFrameHeaderBytes, present), &message, &detail) == Status::kOk) {
      check_decoded(message);
    }
  }
  return 0;
}
