// Internal: the kernels of the built-in trainer, on raw float arrays (row-major, batch outermost).
//
// Each kernel is a plain loop nest written so that g++/clang -O2/-O3 vectorize the innermost loop
// (contiguous, restrict-qualified, no calls); the accumulation order of every output is fixed by
// the source, so with -ffp-contract=off (edgefl_freestanding_options) the results are the same
// bytes on every platform. No kernel allocates; scratch comes from the caller.
//
// Layouts (PyTorch's): dense weight [out][in]; conv weight [out][in][3][3]; images CHW.
// Backward kernels *accumulate* into weight and bias gradients (+=) and *overwrite* the input
// gradient, so a batch's parameter gradient is the sum over its samples.
#ifndef EDGEFL_SRC_TRAIN_LAYERS_H_
#define EDGEFL_SRC_TRAIN_LAYERS_H_

#include <stddef.h>
#include <stdint.h>

namespace edgefl {
namespace train {

// sum_i a[i] * b[i], in 8 interleaved partial sums combined pairwise (vectorizable without
// -ffast-math, and the same order on every ISA).
float dot(const float* a, const float* b, size_t n);

// y[b][o] = bias[o] + sum_i w[o][i] * x[b][i].   x: [batch][in], y: [batch][out]
void dense_forward(const float* x, size_t batch, size_t in, size_t out, const float* w, const float* bias,
                   float* y);

// dw[o][i] += sum_b dy[b][o] x[b][i];  db[o] += sum_b dy[b][o];  dx[b][i] = sum_o dy[b][o] w[o][i]
// (dx may be null: the first layer needs no input gradient). dw and db receive the rows' terms one
// at a time, in row order, so that a batch given in consecutive parts sums to the same bits.
void dense_backward(const float* x, const float* dy, size_t batch, size_t in, size_t out, const float* w,
                    float* dw, float* db, float* dx);

// y = max(y, 0) in place.
void relu_forward(float* y, size_t n);

// dy[i] = 0 where y[i] <= 0 (y is the ReLU's output). The derivative at 0 is taken as 0.
void relu_backward(const float* y, float* dy, size_t n);

// Floats of im2col scratch for one sample of a conv3x3 with c input channels on h x w.
inline size_t im2col3x3_floats(size_t c, size_t h, size_t w) {
  return c * 9 * h * w;
}

// col[(ci*9 + ky*3 + kx)][y*w + x] = x[ci][y+ky-1][x+kx-1], 0 outside the image.
void im2col3x3(const float* x, size_t c, size_t h, size_t w, float* col);

// The adjoint of im2col3x3: dx[ci][y+ky-1][x+kx-1] += col[ci*9 + ky*3 + kx][y*w + x].
void col2im3x3_add(const float* col, size_t c, size_t h, size_t w, float* dx);

// One sample of a 3x3 convolution, stride 1, zero padding 1 ("same"):
// y[co][p] = bias[co] + sum_k wt[co][k] col[k][p], with col = im2col3x3(x) written to `col`
// (im2col3x3_floats(ci, h, w) floats). x: [ci][h][w], y: [co][h][w].
void conv3x3_forward(const float* x, size_t ci, size_t h, size_t w, size_t co, const float* wt,
                     const float* bias, float* col, float* y);

// Gradients of conv3x3_forward for one sample, given dy = dL/dy: dw += dy col^T, db += row sums
// of dy, and, if dx is not null, dx = col2im(wt^T dy). `col` and `dcol` are scratch of
// im2col3x3_floats(ci, h, w) floats each (col is recomputed from x here; dcol is unused when dx
// is null).
void conv3x3_backward(const float* x, const float* dy, size_t ci, size_t h, size_t w, size_t co,
                      const float* wt, float* col, float* dcol, float* dw, float* db, float* dx);

// im2col's transpose, one row per pixel: rows[y*w + x][ci*9 + ky*3 + kx] = x[ci][y+ky-1][x+kx-1]
// (0 outside), and its adjoint (dx += ...). Same size as im2col.
void im2row3x3(const float* x, size_t c, size_t h, size_t w, float* rows);
void row2im3x3_add(const float* rows, size_t c, size_t h, size_t w, float* dx);

// The trainer's fused backward of y = maxpool2(conv3x3(x)) for one sample, given dpool = dL/dy
// (c_out x h/2 x w/2, already masked by the ReLU) and the argmax of maxpool2_forward. Equal to
// maxpool2_backward followed by conv3x3_backward (its reference, tested against it), but it
// visits only the nonzero entries of dpool, at most 1/4 of the conv output and about 1/8 after the
// ReLU, each with two contiguous AXPYs of length ci*9 over the im2row layout. `rows` and `drows`
// are scratch of im2col3x3_floats(ci, h, w) floats (drows unused when dx is null).
void conv3x3_pool_backward(const float* x, const float* dpool, const uint8_t* argmax, size_t ci, size_t h,
                           size_t w, size_t co, const float* wt, float* rows, float* drows, float* dw,
                           float* db, float* dx);

// 2x2 max-pool, stride 2, h and w even: y[c][i][j] = max of x[c][2i..2i+1][2j..2j+1];
// argmax[c][i][j] = position of the first maximum in the window (0..3, row-major).
void maxpool2_forward(const float* x, size_t c, size_t h, size_t w, float* y, uint8_t* argmax);

// dx (c x h x w) = dy routed to the argmax of each window, 0 elsewhere (dx is overwritten).
void maxpool2_backward(const float* dy, const uint8_t* argmax, size_t c, size_t h, size_t w, float* dx);

// Softmax cross-entropy over `batch` rows of `classes` logits. Returns `total` plus the per-row
// losses -log softmax(z)[label], added one at a time in float (so a batch given in consecutive
// parts, each continuing the previous part's total, sums to the same bits); writes
// dlogits = scale * (softmax(z) - onehot(label)) (dlogits may be null) and adds to *correct the
// rows whose first maximal logit is the label (may be null).
float softmax_xent(const float* logits, const uint8_t* labels, size_t batch, size_t classes, float scale,
                   float* dlogits, uint32_t* correct, float total = 0.0f);

// exp(x) for x <= 88 (0 below -87.3) and log(x) for positive normal x, to ~2 ulp, in IEEE float
// arithmetic only (Cody-Waite reduction + polynomials, as in Cephes' expf/logf), so the loss is
// the same bits on every platform and needs no libm.
float exp_f32(float x);
float log_f32(float x);

}  // namespace train
}  // namespace edgefl

#endif  // EDGEFL_SRC_TRAIN_LAYERS_H_
