// The trainer's kernels (contracts in train/layers.h).
//
// Performance notes: the conv forward is im2col + a matrix product whose innermost loop runs over
// the h*w pixels of one output channel (contiguous, vectorized), blocked by 4 output channels so
// that each loaded im2col row feeds 4 accumulating rows. The trainer's backward pass
// (conv3x3_pool_backward) exploits the max-pool: only one conv output in 4 (about 1 in 8 after the
// ReLU) has a gradient, so it scatters those through the im2row layout with two contiguous AXPYs
// each, about 8x fewer operations than the dense conv3x3_backward, which stays as its reference.
// Reductions over long rows use dot(), whose 8 partial sums let the compiler vectorize without
// reassociating (the order is in the source, so results do not depend on the vector width). The
// dense forward takes four outputs per pass over an input row (dot4: dot()'s sums, four
// independent chains, the row loaded once), about 3x faster than a dot() per output.
#include "train/layers.h"

#include <string.h>

namespace edgefl {
namespace train {

namespace {

// y[j] += a * x[j]
inline void axpy(float a, const float* __restrict x, float* __restrict y, size_t n) {
  for (size_t j = 0; j < n; ++j) y[j] += a * x[j];
}

inline float sum(const float* x, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) acc[l] += x[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

// Four float lanes (GCC/Clang vector extension; loads and stores through memcpy: any alignment).
typedef float F32x4 __attribute__((vector_size(16)));

inline F32x4 splat(float v) {
  const F32x4 r = {v, v, v, v};
  return r;
}

inline F32x4 load4(const float* p) {
  F32x4 r;
  memcpy(&r, p, sizeof r);
  return r;
}

inline void store4(float* p, F32x4 v) {
  memcpy(p, &v, sizeof v);
}

inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE_SIZE__)
// Eight lanes in one vector of the compiler's (SSE or AVX, NEON, or scalar code where there is
// none). Written as a vector so that it stays one under instrumentation (sanitized builds), which
// stops the compiler vectorizing the loop.
typedef float Lanes __attribute__((vector_size(8 * sizeof(float)), aligned(sizeof(float))));

// dot()'s last steps: the eight lanes (lanes 0-3 in `lo`, 4-7 in `hi`) combined pairwise, then the
// products from `first` to n.
inline float finish_dot(F32x4 lo, F32x4 hi, const float* a, const float* b, size_t first, size_t n) {
  float tail = 0.0f;
  for (size_t j = first; j < n; ++j) tail += a[j] * b[j];
  return (((lo[0] + hi[0]) + (lo[1] + hi[1])) + ((lo[2] + hi[2]) + (lo[3] + hi[3]))) + tail;
}

// out[r] = dot(x, w + r * in, in) for r = 0..3, each with dot()'s lanes and order, so each result
// is dot()'s bits; x is loaded once for the four rows, and the four sums are independent chains
// (one chain of vector adds bounds dot() by the add's latency).
void dot4(const float* __restrict x, const float* __restrict w, size_t in, float* out) {
  // Each eight-lane sum is kept as two four-lane halves (lanes 0-3 and 4-7): the same sums, held
  // in registers of the baseline ISAs (SSE2, NEON).
  const F32x4 zero = splat(0.0f);
  F32x4 lo0 = zero, hi0 = zero, lo1 = zero, hi1 = zero, lo2 = zero, hi2 = zero, lo3 = zero, hi3 = zero;
  const float* w0 = w;
  const float* w1 = w + in;
  const float* w2 = w + 2 * in;
  const float* w3 = w + 3 * in;
  size_t i = 0;
  for (; i + 8 <= in; i += 8) {
    const F32x4 xl = load4(x + i), xh = load4(x + i + 4);
    lo0 += xl * load4(w0 + i);
    hi0 += xh * load4(w0 + i + 4);
    lo1 += xl * load4(w1 + i);
    hi1 += xh * load4(w1 + i + 4);
    lo2 += xl * load4(w2 + i);
    hi2 += xh * load4(w2 + i + 4);
    lo3 += xl * load4(w3 + i);
    hi3 += xh * load4(w3 + i + 4);
  }
  out[0] = finish_dot(lo0, hi0, x, w0, i, in);
  out[1] = finish_dot(lo1, hi1, x, w1, i, in);
  out[2] = finish_dot(lo2, hi2, x, w2, i, in);
  out[3] = finish_dot(lo3, hi3, x, w3, i, in);
}
#else
void dot4(const float* x, const float* w, size_t in, float* out) {
  for (size_t r = 0; r < 4; ++r) out[r] = dot(x, w + r * in, in);
}
#endif

}  // namespace

float dot(const float* __restrict a, const float* __restrict b, size_t n) {
  size_t i = 0;
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__OPTIMIZE_SIZE__)
  // Each lane sums its products in the order of the loop below, so the result is the same bits.
  Lanes sum = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8) {
    Lanes x, y;
    memcpy(&x, a + i, sizeof x);
    memcpy(&y, b + i, sizeof y);
    sum += x * y;
  }
  const F32x4 lo = {sum[0], sum[1], sum[2], sum[3]}, hi = {sum[4], sum[5], sum[6], sum[7]};
  return finish_dot(lo, hi, a, b, i, n);
#else
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
#endif
}

void dense_forward(const float* x, size_t batch, size_t in, size_t out, const float* w, const float* bias,
                   float* y) {
  for (size_t b = 0; b < batch; ++b) {
    const float* xb = x + b * in;
    float* yb = y + b * out;
    size_t o = 0;
    for (; o + 4 <= out; o += 4) {
      float d[4];
      dot4(xb, w + o * in, in, d);
      for (size_t r = 0; r < 4; ++r) yb[o + r] = bias[o + r] + d[r];
    }
    for (; o < out; ++o) yb[o] = bias[o] + dot(xb, w + o * in, in);
  }
}

void dense_backward(const float* x, const float* dy, size_t batch, size_t in, size_t out, const float* w,
                    float* dw, float* db, float* dx) {
  for (size_t o = 0; o < out; ++o) {
    float* dwo = dw + o * in;
    float bias = db[o];
    for (size_t b = 0; b < batch; ++b) {
      const float g = dy[b * out + o];
      bias += g;
      if (g != 0.0f) axpy(g, x + b * in, dwo, in);  // ReLU zeroes about half of the rows
    }
    db[o] = bias;
  }
  if (dx == nullptr) return;
  for (size_t b = 0; b < batch; ++b) {
    float* dxb = dx + b * in;
    memset(dxb, 0, in * sizeof(float));
    for (size_t o = 0; o < out; ++o) {
      const float g = dy[b * out + o];
      if (g != 0.0f) axpy(g, w + o * in, dxb, in);
    }
  }
}

void relu_forward(float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void relu_backward(const float* y, float* dy, size_t n) {
  for (size_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void im2col3x3(const float* x, size_t c, size_t h, size_t w, float* col) {
  const size_t n = h * w;
  for (size_t ci = 0; ci < c; ++ci) {
    const float* plane = x + ci * n;
    for (size_t ky = 0; ky < 3; ++ky) {
      for (size_t kx = 0; kx < 3; ++kx) {
        float* row = col + ((ci * 3 + ky) * 3 + kx) * n;
        for (size_t oy = 0; oy < h; ++oy) {
          float* dst = row + oy * w;
          const size_t sy = oy + ky;  // source row + 1
          if (sy == 0 || sy > h) {
            memset(dst, 0, w * sizeof(float));
            continue;
          }
          const float* src = plane + (sy - 1) * w;
          if (kx == 0) {  // dst[x] = src[x - 1]
            dst[0] = 0.0f;
            memcpy(dst + 1, src, (w - 1) * sizeof(float));
          } else if (kx == 1) {
            memcpy(dst, src, w * sizeof(float));
          } else {  // dst[x] = src[x + 1]
            memcpy(dst, src + 1, (w - 1) * sizeof(float));
            dst[w - 1] = 0.0f;
          }
        }
      }
    }
  }
}

void col2im3x3_add(const float* col, size_t c, size_t h, size_t w, float* dx) {
  const size_t n = h * w;
  for (size_t ci = 0; ci < c; ++ci) {
    float* plane = dx + ci * n;
    for (size_t ky = 0; ky < 3; ++ky) {
      for (size_t kx = 0; kx < 3; ++kx) {
        const float* row = col + ((ci * 3 + ky) * 3 + kx) * n;
        for (size_t oy = 0; oy < h; ++oy) {
          const size_t sy = oy + ky;
          if (sy == 0 || sy > h) continue;
          const float* __restrict src = row + oy * w;
          float* __restrict dst = plane + (sy - 1) * w;
          if (kx == 0) {
            for (size_t x = 1; x < w; ++x) dst[x - 1] += src[x];
          } else if (kx == 1) {
            for (size_t x = 0; x < w; ++x) dst[x] += src[x];
          } else {
            for (size_t x = 0; x + 1 < w; ++x) dst[x + 1] += src[x];
          }
        }
      }
    }
  }
}

void conv3x3_forward(const float* x, size_t ci, size_t h, size_t w, size_t co, const float* wt,
                     const float* bias, float* col, float* y) {
  const size_t n = h * w, k_count = ci * 9;
  im2col3x3(x, ci, h, w, col);
  // Register tiles of 4 output channels x 8 pixels (the GEMM micro-kernel): per im2col row, 8
  // pixels are loaded once into two 4-lane vectors and feed 8 vector accumulators that stay in
  // registers for the whole k loop. GCC/Clang vector extensions, so the same source is SSE2, NEON
  // or (lowered by the compiler) scalar code; lanes are independent, so every output is still
  // bias + sum over k in increasing k, the same bits as the scalar remainder path below.
  size_t o = 0;
  for (; o + 4 <= co; o += 4) {
    const float* wr[4] = {wt + o * k_count, wt + (o + 1) * k_count, wt + (o + 2) * k_count,
                          wt + (o + 3) * k_count};
    size_t j0 = 0;
    for (; j0 + 8 <= n; j0 += 8) {
      F32x4 acc[4][2];
      for (size_t r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = splat(bias[o + r]);
      const float* c = col + j0;
      for (size_t k = 0; k < k_count; ++k, c += n) {
        const F32x4 v0 = load4(c), v1 = load4(c + 4);
        for (size_t r = 0; r < 4; ++r) {
          const F32x4 a = splat(wr[r][k]);
          acc[r][0] += a * v0;
          acc[r][1] += a * v1;
        }
      }
      for (size_t r = 0; r < 4; ++r) {
        store4(y + (o + r) * n + j0, acc[r][0]);
        store4(y + (o + r) * n + j0 + 4, acc[r][1]);
      }
    }
    for (size_t r = 0; r < 4; ++r) {  // the last n % 8 pixels
      float* yo = y + (o + r) * n;
      for (size_t j = j0; j < n; ++j) yo[j] = bias[o + r];
      for (size_t k = 0; k < k_count; ++k) axpy(wr[r][k], col + k * n + j0, yo + j0, n - j0);
    }
  }
  for (; o < co; ++o) {
    float* yo = y + o * n;
    for (size_t j = 0; j < n; ++j) yo[j] = bias[o];
    const float* wo = wt + o * k_count;
    for (size_t k = 0; k < k_count; ++k) axpy(wo[k], col + k * n, yo, n);
  }
}

void conv3x3_backward(const float* x, const float* dy, size_t ci, size_t h, size_t w, size_t co,
                      const float* wt, float* col, float* dcol, float* dw, float* db, float* dx) {
  const size_t n = h * w, k_count = ci * 9;
  im2col3x3(x, ci, h, w, col);
  for (size_t o = 0; o < co; ++o) {
    const float* dyo = dy + o * n;
    db[o] += sum(dyo, n);
    float* dwo = dw + o * k_count;
    for (size_t k = 0; k < k_count; ++k) dwo[k] += dot(dyo, col + k * n, n);
  }
  if (dx == nullptr) return;
  // dcol[k][p] = sum_o wt[o][k] dy[o][p], 4 rows of dcol per pass over dy.
  size_t k = 0;
  for (; k + 4 <= k_count; k += 4) {
    float* __restrict d0 = dcol + (k + 0) * n;
    float* __restrict d1 = dcol + (k + 1) * n;
    float* __restrict d2 = dcol + (k + 2) * n;
    float* __restrict d3 = dcol + (k + 3) * n;
    memset(d0, 0, 4 * n * sizeof(float));
    for (size_t o = 0; o < co; ++o) {
      const float* __restrict g = dy + o * n;
      const float* wo = wt + o * k_count + k;
      const float a0 = wo[0], a1 = wo[1], a2 = wo[2], a3 = wo[3];
      for (size_t j = 0; j < n; ++j) {
        const float v = g[j];
        d0[j] += a0 * v;
        d1[j] += a1 * v;
        d2[j] += a2 * v;
        d3[j] += a3 * v;
      }
    }
  }
  for (; k < k_count; ++k) {
    float* dk = dcol + k * n;
    memset(dk, 0, n * sizeof(float));
    for (size_t o = 0; o < co; ++o) axpy(wt[o * k_count + k], dy + o * n, dk, n);
  }
  memset(dx, 0, ci * n * sizeof(float));
  col2im3x3_add(dcol, ci, h, w, dx);
}

void im2row3x3(const float* x, size_t c, size_t h, size_t w, float* rows) {
  const size_t k_count = c * 9;
  for (size_t oy = 0; oy < h; ++oy) {
    for (size_t ox = 0; ox < w; ++ox) {
      float* row = rows + (oy * w + ox) * k_count;
      const bool interior = oy > 0 && oy + 1 < h && ox > 0 && ox + 1 < w;
      for (size_t ci = 0; ci < c; ++ci) {
        const float* plane = x + ci * h * w;
        float* r = row + ci * 9;
        if (interior) {
          const float* src = plane + (oy - 1) * w + (ox - 1);
          for (size_t ky = 0; ky < 3; ++ky) {
            for (size_t kx = 0; kx < 3; ++kx) r[ky * 3 + kx] = src[ky * w + kx];
          }
          continue;
        }
        for (size_t ky = 0; ky < 3; ++ky) {
          for (size_t kx = 0; kx < 3; ++kx) {
            const size_t sy = oy + ky, sx = ox + kx;  // source + 1
            r[ky * 3 + kx] = (sy == 0 || sy > h || sx == 0 || sx > w) ? 0.0f : plane[(sy - 1) * w + (sx - 1)];
          }
        }
      }
    }
  }
}

void row2im3x3_add(const float* rows, size_t c, size_t h, size_t w, float* dx) {
  const size_t k_count = c * 9;
  for (size_t oy = 0; oy < h; ++oy) {
    for (size_t ox = 0; ox < w; ++ox) {
      const float* row = rows + (oy * w + ox) * k_count;
      for (size_t ci = 0; ci < c; ++ci) {
        float* plane = dx + ci * h * w;
        const float* r = row + ci * 9;
        for (size_t ky = 0; ky < 3; ++ky) {
          const size_t sy = oy + ky;
          if (sy == 0 || sy > h) continue;
          for (size_t kx = 0; kx < 3; ++kx) {
            const size_t sx = ox + kx;
            if (sx == 0 || sx > w) continue;
            plane[(sy - 1) * w + (sx - 1)] += r[ky * 3 + kx];
          }
        }
      }
    }
  }
}

void conv3x3_pool_backward(const float* x, const float* dpool, const uint8_t* argmax, size_t ci, size_t h,
                           size_t w, size_t co, const float* wt, float* rows, float* drows, float* dw,
                           float* db, float* dx) {
  const size_t k_count = ci * 9, oh = h / 2, ow = w / 2;
  im2row3x3(x, ci, h, w, rows);
  if (dx != nullptr) memset(drows, 0, h * w * k_count * sizeof(float));
  for (size_t o = 0; o < co; ++o) {
    const float* g = dpool + o * oh * ow;
    const uint8_t* arg = argmax + o * oh * ow;
    const float* wo = wt + o * k_count;
    float* dwo = dw + o * k_count;
    float bias_sum = 0.0f;
    for (size_t i = 0; i < oh; ++i) {
      for (size_t j = 0; j < ow; ++j) {
        const float gv = g[i * ow + j];
        if (gv == 0.0f) continue;
        const uint8_t a = arg[i * ow + j];
        const size_t pixel = (2 * i + (a >> 1)) * w + 2 * j + (a & 1);
        bias_sum += gv;
        axpy(gv, rows + pixel * k_count, dwo, k_count);
        if (dx != nullptr) axpy(gv, wo, drows + pixel * k_count, k_count);
      }
    }
    db[o] += bias_sum;
  }
  if (dx == nullptr) return;
  memset(dx, 0, ci * h * w * sizeof(float));
  row2im3x3_add(drows, ci, h, w, dx);
}

void maxpool2_forward(const float* x, size_t c, size_t h, size_t w, float* y, uint8_t* argmax) {
  const size_t oh = h / 2, ow = w / 2;
  for (size_t ci = 0; ci < c; ++ci) {
    const float* plane = x + ci * h * w;
    for (size_t i = 0; i < oh; ++i) {
      const float* __restrict r0 = plane + (2 * i) * w;
      const float* __restrict r1 = r0 + w;
      float* __restrict out = y + (ci * oh + i) * ow;
      uint8_t* __restrict arg = argmax + (ci * oh + i) * ow;
      // Branchless, so the loop vectorizes: the first maximum of (r0[2j], r0[2j+1]) and of
      // (r1[2j], r1[2j+1]), then of the two, ties going to the earlier position.
      for (size_t j = 0; j < ow; ++j) {
        const float a = r0[2 * j], b = r0[2 * j + 1], c2 = r1[2 * j], d = r1[2 * j + 1];
        const bool right_top = b > a, right_bottom = d > c2;
        const float top = right_top ? b : a, bottom = right_bottom ? d : c2;
        const bool lower = bottom > top;
        out[j] = lower ? bottom : top;
        arg[j] = uint8_t(lower ? 2 + int(right_bottom) : int(right_top));
      }
    }
  }
}

void maxpool2_backward(const float* dy, const uint8_t* argmax, size_t c, size_t h, size_t w, float* dx) {
  const size_t oh = h / 2, ow = w / 2;
  memset(dx, 0, c * h * w * sizeof(float));
  for (size_t ci = 0; ci < c; ++ci) {
    float* plane = dx + ci * h * w;
    const float* g = dy + ci * oh * ow;
    const uint8_t* arg = argmax + ci * oh * ow;
    for (size_t i = 0; i < oh; ++i) {
      for (size_t j = 0; j < ow; ++j) {
        const uint8_t a = arg[i * ow + j];
        plane[(2 * i + (a >> 1)) * w + 2 * j + (a & 1)] = g[i * ow + j];
      }
    }
  }
}

float softmax_xent(const float* logits, const uint8_t* labels, size_t batch, size_t classes, float scale,
                   float* dlogits, uint32_t* correct, float total) {
  for (size_t b = 0; b < batch; ++b) {
    const float* z = logits + b * classes;
    const size_t label = labels[b];
    size_t best = 0;
    for (size_t k = 1; k < classes; ++k) {
      if (z[k] > z[best]) best = k;
    }
    const float m = z[best];
    float s = 0.0f;
    for (size_t k = 0; k < classes; ++k) s += exp_f32(z[k] - m);
    // s >= 1 (the maximum contributes exp(0) = 1), so the log is finite.
    total += log_f32(s) - (z[label] - m);
    if (correct != nullptr && best == label) ++*correct;
    if (dlogits != nullptr) {
      float* d = dlogits + b * classes;
      const float inv = scale / s;
      for (size_t k = 0; k < classes; ++k) d[k] = exp_f32(z[k] - m) * inv;
      d[label] -= scale;
    }
  }
  return total;
}

// Cody-Waite range reduction x = k ln2 + r, |r| <= ln2 / 2, then e^r by its Taylor polynomial to
// degree 7 (truncation < 6e-9 relative) and 2^k from the exponent bits. Constants from Cephes
// expf.c (S. Moshier).
float exp_f32(float x) {
  if (!(x > -87.3f)) return 0.0f;  // also NaN -> 0: callers pass z - max(z) <= 0
  if (x > 88.0f) x = 88.0f;
  const float t = x * 1.44269504088896341f;
  const int k = int(t < 0.0f ? t - 0.5f : t + 0.5f);  // round half away from zero
  const float kf = float(k);
  float r = x - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * bits_to_float(uint32_t(k + 127) << 23);  // k in [-126, 127]
}

// x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(t), t = (m - 1) / (m + 1), |t| <=
// 0.172, by its series to t^9 (truncation < 3e-10).
float log_f32(float x) {
  const uint32_t bits = float_to_bits(x);
  int e = int((bits >> 23) & 0xFFu) - 127;
  float m = bits_to_float((bits & 0x7FFFFFu) | 0x3F800000u);
  if (m > 1.41421356f) {
    m *= 0.5f;
    e += 1;
  }
  const float t = (m - 1.0f) / (m + 1.0f);
  const float t2 = t * t;
  float p = 1.0f / 9.0f;
  p = p * t2 + 1.0f / 7.0f;
  p = p * t2 + 1.0f / 5.0f;
  p = p * t2 + 1.0f / 3.0f;
  p = p * t2 + 1.0f;
  const float ef = float(e);
  return (2.0f * t * p + ef * -2.12194440e-4f) + ef * 0.693359375f;
}

}  // namespace train
}  // namespace edgefl
