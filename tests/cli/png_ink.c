// png_ink FILE.png Y0 Y1 [Y0 Y1 ...]: for each band of rows [Y0, Y1), the
// number of coloured pixels (channels apart by more than 60: the plot's
// lines, not its white, grey frame, grid or black text) in an 8-bit RGB or
// RGBA PNG (rsvg-convert's output). The plot test's check that panels are
// not blank; exit 2 on a file it cannot read.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2) { fprintf(stderr, "usage: png_ink FILE.png Y0 Y1 [Y0 Y1 ...]\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len), *idat = malloc((size_t)len);
    if (!buf || !idat || fread(buf, 1, (size_t)len, f) != (size_t)len || len < 8 || memcmp(buf, "\x89PNG\r\n\x1a\n", 8)) {
        fprintf(stderr, "%s: not a PNG\n", argv[1]);
        return 2;
    }
    fclose(f);
    uint32_t w = 0, h = 0;
    int ch = 0;
    size_t ni = 0;
    for (long p = 8; p + 12 <= len;) {
        uint32_t n = be32(buf + p);
        const unsigned char *type = buf + p + 4, *d = buf + p + 8;
        if (p + 12 + (long)n > len) break;
        if (!memcmp(type, "IHDR", 4)) {
            w = be32(d); h = be32(d + 4);
            if (d[8] != 8 || (d[9] != 2 && d[9] != 6) || d[12]) { fprintf(stderr, "%s: not 8-bit RGB(A), non-interlaced\n", argv[1]); return 2; }
            ch = d[9] == 6 ? 4 : 3;
        } else if (!memcmp(type, "IDAT", 4)) {
            memcpy(idat + ni, d, n);
            ni += n;
        }
        p += 12 + (long)n;
    }
    size_t stride = (size_t)w * ch, raw_len = (size_t)h * (stride + 1);
    unsigned char *raw = malloc(raw_len), *img = malloc((size_t)h * stride);
    uLongf got = raw_len;
    if (!w || !raw || !img || uncompress(raw, &got, idat, ni) != Z_OK || got != raw_len) {
        fprintf(stderr, "%s: cannot inflate the image data\n", argv[1]);
        return 2;
    }
    for (uint32_t y = 0; y < h; y++) {   // undo the scanline filters
        const unsigned char *in = raw + y * (stride + 1) + 1;
        unsigned char *out = img + y * stride, *up = y ? out - stride : NULL;
        int ft = in[-1];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)ch ? out[x - ch] : 0, b = up ? up[x] : 0, c = up && x >= (size_t)ch ? up[x - ch] : 0;
            int v = in[x] + (ft == 1 ? a : ft == 2 ? b : ft == 3 ? (a + b) / 2 : ft == 4 ? paeth(a, b, c) : 0);
            out[x] = (unsigned char)v;
        }
    }
    for (int k = 2; k + 1 < argc; k += 2) {
        long y0 = atol(argv[k]), y1 = atol(argv[k + 1]), ink = 0;
        for (long y = y0 < 0 ? 0 : y0; y < y1 && y < (long)h; y++)
            for (uint32_t x = 0; x < w; x++) {
                const unsigned char *px = img + (size_t)y * stride + (size_t)x * ch;
                int mx = px[0] > px[1] ? px[0] : px[1], mn = px[0] < px[1] ? px[0] : px[1];
                mx = px[2] > mx ? px[2] : mx;
                mn = px[2] < mn ? px[2] : mn;
                if (mx - mn > 60 && (ch == 3 || px[3] > 128)) ink++;
            }
        printf("%ld\n", ink);
    }
    return 0;
}
