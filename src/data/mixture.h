// data/mixture — a weighted mixture of token sources for train --data and
// --val-data (Megatron's BlendedDataset), and the rule that interleaves them.
//
// A spec is NAME=PATH:WEIGHT[,NAME=PATH:WEIGHT...] (the weight after the
// last ':' of an entry; a path holding ',' needs the JSON form), or a
// FILE.json holding
//   {"sources": [{"name": "web", "path": "DIR", "weight": 0.7}, ...]}
// (or that array alone). PATH is what a plain --data takes (a shard
// directory, glob, .bin or text file; a relative path is the working
// directory's). Names are unique, 1 to 47 characters of [A-Za-z0-9_.-];
// weights are positive and need not sum to 1 (they are normalized). A
// string that names an existing file or directory (other than a .json), or
// holds no '=', is a plain path: one source, as --data always took.
//
// The order: sequence n of the mixture (0-based, over the whole run) comes
// from the source s that maximizes w_s·(n+1) − c_s, where w_s is s's
// normalized weight and c_s the sequences s gave to sequences 0..n−1; ties
// go to the lowest index (Megatron's rule). So the first N sequences hold
// each of two or three sources within one sequence of w_s·N (with more
// sources a prefix can stray a little past one: at most about 1.06 in the
// tests' random draws), and the order is a pure function of the weights and
// n: any rank can compute any part of it from the counts alone.
#ifndef TSR_DATA_MIXTURE_H
#define TSR_DATA_MIXTURE_H

#include <stdint.h>

#include "core/check.h"

enum { MIX_MAX_SOURCES = 16, MIX_NAME_MAX = 48 };

typedef struct MixSource {
    char name[MIX_NAME_MAX];   // "" for a plain path
    char *path;
    double weight;             // normalized: the sources' weights sum to 1
} MixSource;

typedef struct Mixture {
    int n;                     // sources, 1..MIX_MAX_SOURCES
    int plain;                 // a plain path (one source, no name): not a mixture
    MixSource src[MIX_MAX_SOURCES];
} Mixture;

// Parses spec (the value of flag, which error messages name: a missing
// path, a bad or zero weight, an empty or repeated name, a malformed JSON
// file), each named source's path checked to exist (a glob is left to the
// loader). 0, or -1 with err (ERR_USAGE).
int mix_parse(Mixture *m, const char *spec, const char *flag, Err *err);
void mix_free(Mixture *m);

// The source of the next sequence, given each source's count so far and
// the normalized weights (n sources).
int mix_pick(const double *w, const int64_t *count, int n);

// The sources' shards are of one tokenizer, `tokenizer`: a source directory
// whose record (shard_info_read) names another is refused. Sources without
// a record are left to the vocabulary check of shard_open. 0, or -1 with
// err (ERR_USAGE) naming the source and the two tokenizers.
int mix_check_tokenizer(const Mixture *m, const char *tokenizer, Err *err);

// "name w, name w" (weights with 4 significant digits) into buf.
void mix_describe(const Mixture *m, char *buf, int cap);

#endif
