// data/heap — the binary min-heap both tokenizers (data/bpe, data/spm)
// order their candidate merges with: the item of smallest key leaves first.
//
// An item carries, besides its key, the node (symbol position) its merge
// starts at and a tag the caller compares with the node's state when the
// item leaves, to skip items gone stale since they were pushed (BPE: the
// merge's rank, SentencePiece: the node's version).
//
// Keys alone are compared. Items of equal keys leave in an order fixed by
// the sequence of pushes and pops, so encoding is repeatable. BPE's keys
// (rank, position) never tie between different merges, but SentencePiece's
// (rank + position / length, a double) can, so its ids may depend on this
// exact sift-up and sift-down: keep them as they are.
#ifndef TSR_DATA_HEAP_H
#define TSR_DATA_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t key; int node, tag; } HeapItem;

typedef struct {
    HeapItem *item;   // item[0..n) in heap order; room for cap
    size_t n, cap;
} Heap;               // {0} is an empty heap with no room

// Makes room for at least cap items, keeping the heap's; 0, or -1 when out
// of memory (the heap unchanged).
int heap_reserve(Heap *h, size_t cap);
void heap_free(Heap *h);
void heap_clear(Heap *h);
// Adds x; the caller has reserved room (an always-on CHECK).
void heap_push(Heap *h, HeapItem x);
// Removes and returns the item of smallest key; the heap is not empty.
HeapItem heap_pop(Heap *h);

#endif
