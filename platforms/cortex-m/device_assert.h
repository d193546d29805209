// platforms/cortex-m/device_assert.h: FlatBuffers' internal consistency checks on the device
// (FLATBUFFERS_ASSERT=edgefl_device_assert, FLATBUFFERS_ASSERT_INCLUDE this file: CMakeLists.txt).
// A failed check ends the program (device_client.cpp) instead of calling libc's assert.
#ifndef EDGEFL_PLATFORMS_CORTEX_M_DEVICE_ASSERT_H_
#define EDGEFL_PLATFORMS_CORTEX_M_DEVICE_ASSERT_H_

#ifdef __cplusplus
extern "C" {
#endif
__attribute__((noreturn)) void edgefl_device_assert_failed(void);
#ifdef __cplusplus
}
#endif

#define edgefl_device_assert(x) ((x) ? (void)0 : edgefl_device_assert_failed())

#endif  // EDGEFL_PLATFORMS_CORTEX_M_DEVICE_ASSERT_H_
