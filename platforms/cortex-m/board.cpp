// platforms/cortex-m/board.cpp: the MPS2 AN386 UART0 and Timer0 (Arm DDI0479C, CMSDK APB UART and
// APB Timer), polled.
#include "board.h"

namespace board {
namespace {

struct CmsdkUart {
  volatile uint32_t data;       // 0x00
  volatile uint32_t state;      // 0x04: bit 0 TX full, bit 1 RX full
  volatile uint32_t ctrl;       // 0x08: bit 0 TX enable, bit 1 RX enable
  volatile uint32_t intstatus;  // 0x0C
  volatile uint32_t bauddiv;    // 0x10
};
struct CmsdkTimer {
  volatile uint32_t ctrl;    // 0x00: bit 0 enable
  volatile uint32_t value;   // 0x04
  volatile uint32_t reload;  // 0x08
  volatile uint32_t intstatus;
};

CmsdkUart& uart0() {
  return *reinterpret_cast<CmsdkUart*>(0x40004000u);
}
CmsdkTimer& timer0() {
  return *reinterpret_cast<CmsdkTimer*>(0x40000000u);
}

constexpr uint32_t kTxFull = 1u << 0;
constexpr uint32_t kRxFull = 1u << 1;

uint64_t g_ticks = 0;
uint32_t g_last_value = 0xFFFFFFFFu;
uint64_t g_wait_ticks = 0;

}  // namespace

void uart_init() {
  uart0().bauddiv = 16;
  uart0().ctrl = 0x3;
}

void uart_write(const uint8_t* data, size_t length) {
  for (size_t i = 0; i < length; ++i) {
    while (uart0().state & kTxFull) {
    }
    uart0().data = data[i];
  }
}

size_t uart_read(uint8_t* data, size_t length, uint32_t timeout_ms) {
  if (length == 0) return 0;
  const uint64_t start = ticks();
  const uint64_t limit = ms_to_ticks(timeout_ms);
  while (!(uart0().state & kRxFull)) {
    if (ticks() - start > limit) {
      g_wait_ticks += ticks() - start;
      return 0;
    }
  }
  g_wait_ticks += ticks() - start;
  size_t n = 0;
  while (n < length && (uart0().state & kRxFull)) data[n++] = static_cast<uint8_t>(uart0().data);
  return n;
}

void timer_init() {
  timer0().ctrl = 0;
  timer0().reload = 0xFFFFFFFFu;
  timer0().value = 0xFFFFFFFFu;
  g_last_value = 0xFFFFFFFFu;
  timer0().ctrl = 1;
}

uint64_t ticks() {
  const uint32_t now = timer0().value;
  g_ticks += static_cast<uint32_t>(g_last_value - now);  // a down-counter; wraps modulo 2^32
  g_last_value = now;
  return g_ticks;
}

uint64_t uart_wait_ticks() {
  return g_wait_ticks;
}

}  // namespace board
