// platforms/cortex-m/device_shard.h: the device's training data, in flash (make_shard.py writes
// the definitions at build time from Debian's dataset-fashion-mnist).
#ifndef EDGEFL_PLATFORMS_CORTEX_M_DEVICE_SHARD_H_
#define EDGEFL_PLATFORMS_CORTEX_M_DEVICE_SHARD_H_

#include <stdint.h>

extern const uint32_t kShardCount;     // samples
extern const uint32_t kShardFirst;     // index of the first one in the training set
extern const uint32_t kShardInputDim;  // 784
extern const uint8_t kShardLabels[];   // kShardCount labels, 0..9
extern const float kShardInputs[];     // kShardCount x kShardInputDim, normalized, row-major

#endif  // EDGEFL_PLATFORMS_CORTEX_M_DEVICE_SHARD_H_
