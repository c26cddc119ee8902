#include "model/doc.h"

#include <stddef.h>

void doc_bounds(const int *tokens, int B, int T, int sep, int *start, int *pos) {
    for (int b = 0; b < B; b++) {
        const int *tok = tokens + (size_t)b * T;
        int s = 0;
        for (int t = 0; t < T; t++) {
            if (tok[t] == sep) s = t;
            start[(size_t)b * T + t] = s;
            pos[(size_t)b * T + t] = t - s;
        }
    }
}

double doc_pairs(const int *tokens, int B, int T, int sep) {
    double n = 0;
    for (int b = 0; b < B; b++) {
        const int *tok = tokens + (size_t)b * T;
        int s = 0;
        for (int t = 0; t < T; t++) {
            if (tok[t] == sep) s = t;
            n += t - s + 1;
        }
    }
    return n;
}
