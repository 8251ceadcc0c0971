// The fixed end of exercise mandelbrot's CUDA file: the entry point(s) the check calls. `invoke exercise start
// mandelbrot --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: float32, 16x16 blocks over (width, height).
extern "C" int exercise_run(uint32_t *out, int width, int height, int max_iters, float x0, float span_x, float y0,
                            float span_y, void *stream) {
    const dim3 block(16, 16), grid((unsigned)cdiv(width, 16), (unsigned)cdiv(height, 16));
    mandelbrot_01_naive<float><<<grid, block, 0, (cudaStream_t)stream>>>(out, width, height, max_iters, x0, span_x,
                                                                         y0, span_y);
    return (int)cudaGetLastError();
}
