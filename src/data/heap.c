#include "data/heap.h"

#include <stdlib.h>

#include "core/check.h"

int heap_reserve(Heap *h, size_t cap) {
    if (cap <= h->cap) return 0;
    HeapItem *p = realloc(h->item, cap * sizeof *p);
    if (!p) return -1;
    h->item = p;
    h->cap = cap;
    return 0;
}

void heap_free(Heap *h) {
    free(h->item);
    *h = (Heap){0};
}

void heap_clear(Heap *h) { h->n = 0; }

void heap_push(Heap *h, HeapItem x) {
    CHECK(h->n < h->cap);
    HeapItem *a = h->item;
    size_t i = h->n++;
    while (i > 0 && x.key < a[(i - 1) / 2].key) {
        a[i] = a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    a[i] = x;
}

HeapItem heap_pop(Heap *h) {
    CHECK(h->n > 0);
    HeapItem *a = h->item;
    HeapItem top = a[0], last = a[--h->n];
    size_t n = h->n, i = 0;
    // sift the last item down from the root: to the smaller child (the
    // left one on a tie) while that child is smaller than it
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && a[c + 1].key < a[c].key) c++;
        if (!(a[c].key < last.key)) break;
        a[i] = a[c];
        i = c;
    }
    a[i] = last;
    return top;
}
