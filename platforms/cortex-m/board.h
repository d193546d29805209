// platforms/cortex-m/board.h: the MPS2 AN386 peripherals the device programs use, as QEMU models
// them: the CMSDK APB UART0 (the device's link: QEMU bridges it to a TCP socket with
// `-serial tcp:HOST:PORT`) and the CMSDK APB Timer0 (a 25 MHz down-counter: timeouts and the
// phases' durations). Polled, no interrupts. Another board replaces this file.
#ifndef EDGEFL_PLATFORMS_CORTEX_M_BOARD_H_
#define EDGEFL_PLATFORMS_CORTEX_M_BOARD_H_

#include <stddef.h>
#include <stdint.h>

namespace board {

constexpr uint32_t kTimerHz = 25000000;  // the MPS2's peripheral clock

// UART0 on, 8N1; the baud divisor is irrelevant to QEMU (it forwards bytes as they come).
void uart_init();
// Sends every byte (blocks while the transmitter is full).
void uart_write(const uint8_t* data, size_t length);
// Reads at least one byte and at most `length` (whatever has arrived by then) into `data`, waiting
// at most `timeout_ms`. Returns the count, 0 on timeout.
size_t uart_read(uint8_t* data, size_t length, uint32_t timeout_ms);

// Timer0 free-running from 0xFFFFFFFF; ticks() extends it to 64 bits (call it at least every
// 171 s, which every wait loop does).
void timer_init();
uint64_t ticks();
inline uint64_t ms_to_ticks(uint32_t ms) {
  return uint64_t{ms} * (kTimerHz / 1000);
}
inline uint32_t ticks_to_ms(uint64_t t) {
  return static_cast<uint32_t>(t / (kTimerHz / 1000));
}

// Ticks spent inside uart_read() waiting for bytes that had not arrived yet (the network's share
// of a phase, as opposed to the device's own work).
uint64_t uart_wait_ticks();

}  // namespace board

#endif  // EDGEFL_PLATFORMS_CORTEX_M_BOARD_H_
