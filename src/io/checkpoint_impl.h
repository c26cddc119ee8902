// io/checkpoint_impl.h — what the checkpoint writer (checkpoint.c) and
// reader (checkpoint_read.c) share: the fixed header of a rank's tensor
// file, laid out in io/checkpoint.h. Private to io/checkpoint*.
#ifndef TSR_IO_CHECKPOINT_IMPL_H
#define TSR_IO_CHECKPOINT_IMPL_H

// The first 8 bytes of a tensor file: the 7 letters and the string's
// terminating zero.
#define CKPT_MAGIC "TSRTENS"
enum { CKPT_HEADER_BYTES = 32, CKPT_FILE_VERSION = 1 };

#endif
