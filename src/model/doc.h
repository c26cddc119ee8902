// model/doc — document masking (`tessera train --doc-mask`): where each
// position's document starts in a packed sequence.
//
// `tessera prepare` writes a separator token at the head of every document
// (GPT-2's end-of-text; LLaMA's <s>, with which every text opens): a
// document starts at a row's first position and at every separator, so a
// separator opens the document it precedes and the token before it (the
// previous document's last) is trained to predict it. Attention then stays
// inside a document, and positions (GPT-2's learned table, the rotary
// angles) count from its first token.
#ifndef TSR_MODEL_DOC_H
#define TSR_MODEL_DOC_H

// For rows of T tokens (B,T): start (B,T) := the row position of each
// position's document's first token, pos (B,T) := its place in the
// document (t − start).
void doc_bounds(const int *tokens, int B, int T, int sep, int *start, int *pos);

// The (query, key) pairs causal attention computes over these rows with
// document masking: the sum over documents of L(L+1)/2 (B·T(T+1)/2 with no
// separator).
double doc_pairs(const int *tokens, int B, int T, int sep);

#endif
