// bench_tokenizer — GPT-2 encoding throughput on a text file repeated to at
// least 20 MB: one thread with one state, then all threads over pieces cut
// with bpe_split_point (as tessera prepare does). Caches start cold. With
// "llama": LLaMA's tokenizer on the file as one sequence (it has no safe cut
// points), the best of three.
//   bench_tokenizer FILE THREADS [llama]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "data/tokenizer.h"

static int bench_llama(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 2; }
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    char *text = malloc(n);
    if (fread(text, 1, n, f) != n) return 2;
    fclose(f);
    Err e;
    Tokenizer tok;
    if (tokenizer_open(&tok, "llama", &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    int *ids = malloc((n + 2) * sizeof *ids);
    double best = 1e30;
    size_t m = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = timer_now();
        m = tokenizer_encode(&tok, text, n, ids, n + 2);
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    printf("tessera llama tokenizer                %7.2f MB/s   %zu ids   %.3f s\n", n / 1e6 / best, m, best);
    tokenizer_close(&tok);
    free(ids);
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[3], "llama")) return bench_llama(argv[1]);
    if (argc != 3) { fprintf(stderr, "usage: bench_tokenizer FILE THREADS [llama]\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    size_t n1 = (size_t)ftell(f);
    rewind(f);
    size_t reps = (20u << 20) / n1 + 1, n = n1 * reps;
    char *text = malloc(n);
    if (fread(text, 1, n1, f) != n1) return 2;
    fclose(f);
    for (size_t r = 1; r < reps; r++) memcpy(text + r * n1, text, n1);
    Err e;
    Tokenizer tok;
    if (tokenizer_open(&tok, "gpt2", &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    int *ids = malloc(n * sizeof *ids);
    BpeState *one = bpe_state_new(tok.bpe);
    double t0 = timer_now();
    size_t m1 = tokenizer_encode_with(&tok, one, text, n, ids, n);
    double t1 = timer_now() - t0;
    bpe_state_free(one);
    int nth = atoi(argv[2]);
    omp_set_num_threads(nth);
    enum { PIECE = 1 << 20 };
    size_t cuts[4096], np = 0;
    cuts[0] = 0;
    while (cuts[np] < n && np + 1 < 4096) {
        size_t t = cuts[np] + PIECE;
        cuts[np + 1] = t >= n ? n : bpe_split_point((const unsigned char *)text, t, n);
        np++;
    }
    BpeState *st[64] = {0};
    for (int t = 0; t < nth && t < 64; t++) st[t] = bpe_state_new(tok.bpe);
    size_t counts[4096];
    t0 = timer_now();
    #pragma omp parallel for schedule(dynamic, 1)
    for (size_t k = 0; k < np; k++)
        counts[k] = tokenizer_encode_with(&tok, st[omp_get_thread_num()], text + cuts[k], cuts[k + 1] - cuts[k],
                                          ids + cuts[k], cuts[k + 1] - cuts[k]);
    double tn = timer_now() - t0;
    size_t mn = 0;
    for (size_t k = 0; k < np; k++) mn += counts[k];
    printf("tessera  %5.1f MB | %9zu tokens | 1 thread %7.2f MB/s | %d threads %7.2f MB/s (%.2fx)%s\n", n / 1e6, m1,
           n / 1e6 / t1, nth, n / 1e6 / tn, t1 / tn, mn == m1 ? "" : "  TOKEN COUNTS DIFFER");
    return mn == m1 ? 0 : 1;
}
