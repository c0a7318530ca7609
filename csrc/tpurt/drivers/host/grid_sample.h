/* grid_sample.h — torch.nn.functional.grid_sample (2-D and 3-D) on the host (internal): custom
 * targets GRID_SAMPLE and GRID_SAMPLE_BWD (ir.h). Any strides, f32/f64 operands; coordinates and
 * interpolation in double, with PyTorch's unnormalize / padding (zeros, border, reflection) /
 * (tri)linear, nearest (round half to even) and bicubic (A = -0.75, 2-D only) rules; non-finite
 * coordinates follow the CPU kernels (2-D: the vectorized kernel's, 3-D: the scalar kernel's).
 * The backward computes d input (a scatter: parallel over N*C planes) or d grid (parallel over
 * output rows). Legend: N batch, C channels, [D x] H x W input, [Do x] Ho x Wo grid. Thread-safe.
 *
 *     // out [N, C, Ho, Wo] = GRID_SAMPLE(x [N, C, H, W], grid [N, Ho, Wo, 2]), i1 = 0 (bilinear, zeros)
 *     tpu_status_t st = tpu_host_k_grid_sample(op, 2, xs, &out);
 *
 * Errors: INTERNAL for malformed operands (the lowering checks user input). */
#ifndef TPURT_DRIVERS_HOST_GRID_SAMPLE_H_
#define TPURT_DRIVERS_HOST_GRID_SAMPLE_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_grid_sample(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_GRID_SAMPLE_H_ */
