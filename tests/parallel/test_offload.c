// parallel/offload: a unit never written reads as zeros; passes hand every
// unit over in order with the values last written (an oracle copy in
// memory, updated alike, over many passes through the 3-buffer ring, every
// other one started ahead and one of those called off by a map); the
// files are mapped whole with those values; a file changed or truncated
// underneath stops the next pass with an error naming it; the directory
// is created fresh, its files reserved whole, and removed at close unless
// kept; the allocator's offload figure counts the files while they exist;
// what a killed process of this host left is removed at the next open.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "parallel/offload.h"
#include "test.h"

static const char *const names[3] = {"a", "b", "c"};
enum { NU = 7, KINDS = 3 };
static const size_t unit_n[NU] = {5, 1000, 1, 333, 4096, 17, 250};

static char base[256];

static void units(size_t *off, size_t *total) {
    size_t at = 0;
    for (int u = 0; u < NU; u++) {
        off[u] = at;
        at += unit_n[u];
    }
    *total = at;
}

static void test_passes(void) {
    size_t off[NU], total;
    units(off, &total);
    Offload *o;
    Err e;
    size_t disk0 = mem_offload();
    EXPECT(offload_open(&o, base, "--dir", 3, KINDS, names, off, unit_n, NU, 0, &e) == 0, "%s", e.msg);
    if (!o) return;
    EXPECT(mem_offload() - disk0 == KINDS * total * sizeof(float), "offload figure %zu", mem_offload() - disk0);
    char path[600];
    snprintf(path, sizeof path, "%s/a.f32", offload_dir(o));
    struct stat sb;
    EXPECT(stat(path, &sb) == 0 && (size_t)sb.st_size == total * sizeof(float), "a.f32 reserved whole");
    EXPECT(strstr(offload_dir(o), "/offload-r00003-") != NULL, "directory %s", offload_dir(o));
    float *oracle = calloc(KINDS * total, sizeof(float));
    // unit 2 of kind 1 written before the passes; the rest starts as zeros
    float seven = 7.0f;
    EXPECT(offload_write(o, 1, 2, &seven, &e) == 0, "%s", e.msg);
    oracle[1 * total + off[2]] = 7.0f;
    int wrong = 0;
    for (int pass = 0; pass < 5; pass++) {
        EXPECT(offload_pass_begin(o, &e) == 0, "%s", e.msg);
        for (int u = 0; u < NU; u++) {
            float *b[OFFLOAD_MAX_KINDS];
            if (offload_unit(o, u, b, &e)) { EXPECT(0, "pass %d unit %d: %s", pass, u, e.msg); break; }
            for (int k = 0; k < KINDS; k++)
                for (size_t i = 0; i < unit_n[u]; i++) {
                    float *x = &oracle[k * total + off[u] + i];
                    wrong += b[k][i] != *x;
                    *x = *x * 0.5f + (float)(pass + k + i);
                    b[k][i] = *x;
                }
            offload_unit_done(o, u);
        }
        EXPECT(offload_pass_end(o, &e) == 0, "%s", e.msg);
        // every other pass starts ahead (the last one is called off by the map below)
        if (pass % 2 == 0) EXPECT(offload_prefetch(o, &e) == 0, "%s", e.msg);
    }
    EXPECT(wrong == 0, "%d values differ from what was written", wrong);
    // the bytes of the units taken: pass 0 read only the one value written before it
    EXPECT(offload_bytes_read(o) == 4 * KINDS * total * sizeof(float) + sizeof(float), "read %llu",
           (unsigned long long)offload_bytes_read(o));
    EXPECT(offload_bytes_written(o) == 5 * KINDS * total * sizeof(float), "written %llu",
           (unsigned long long)offload_bytes_written(o));
    for (int k = 0; k < KINDS; k++) {
        const float *m = offload_map(o, k, &e);
        EXPECT(m && !memcmp(m, oracle + k * total, total * sizeof(float)), "kind %d mapped whole", k);
    }
    offload_unmap(o);
    // a value changed underneath: the next pass stops naming the file
    FILE *f = fopen(path, "r+b");
    if (f) { fseek(f, (long)(off[4] * sizeof(float) + 8), SEEK_SET); fputc(0x5a, f); fclose(f); }
    EXPECT(offload_pass_begin(o, &e) == 0, "%s", e.msg);
    int failed = 0;
    for (int u = 0; u < NU && !failed; u++) {
        float *b[OFFLOAD_MAX_KINDS];
        if (offload_unit(o, u, b, &e)) failed = 1;
        else offload_unit_done(o, u);
    }
    Err e2;
    EXPECT(offload_pass_end(o, &e2) == -1 && failed && strstr(e.msg, "a.f32") && strstr(e.msg, "changed underneath"),
           "a changed file: %s", e.msg);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", offload_dir(o));
    offload_close(o);
    EXPECT(stat(dir, &sb) != 0, "the directory %s is removed at close", dir);
    EXPECT(mem_offload() == disk0, "the offload figure back to %zu", disk0);
    free(oracle);
}

static void test_truncated_and_kept(void) {
    size_t off[NU], total;
    units(off, &total);
    Offload *o;
    Err e;
    EXPECT(offload_open(&o, base, "--dir", 0, 2, names, off, unit_n, NU, 1, &e) == 0, "%s", e.msg);
    if (!o) return;
    float *ones = malloc(4096 * sizeof(float));
    for (int i = 0; i < 4096; i++) ones[i] = 1.0f;
    for (int u = 0; u < NU; u++) EXPECT(offload_write(o, 0, u, ones, &e) == 0, "%s", e.msg);
    char path[1300], dir[600];
    snprintf(dir, sizeof dir, "%s", offload_dir(o));
    snprintf(path, sizeof path, "%s/a.f32", dir);
    EXPECT(truncate(path, 0) == 0, "truncate");
    EXPECT(offload_pass_begin(o, &e) == 0, "%s", e.msg);
    float *b[OFFLOAD_MAX_KINDS];
    EXPECT(offload_unit(o, 0, b, &e) == -1 && strstr(e.msg, "a.f32") && strstr(e.msg, "truncated"), "truncated: %s", e.msg);
    EXPECT(offload_pass_end(o, &e) == -1, "the pass ends failed");
    offload_close(o);
    struct stat sb;
    EXPECT(stat(path, &sb) == 0, "kept: %s stays", path);
    unlink(path);
    snprintf(path, sizeof path, "%s/b.f32", dir);
    unlink(path);
    rmdir(dir);
    free(ones);
}

static void test_bad_base(void) {
    size_t off[NU], total;
    units(off, &total);
    Offload *o;
    Err e;
    EXPECT(offload_open(&o, "/nonexistent/tessera", "--offload-dir", 0, 2, names, off, unit_n, NU, 0, &e) == -1 &&
           e.code == ERR_USAGE && strstr(e.msg, "--offload-dir /nonexistent/tessera"), "%s", e.msg);
}

// Directories a killed process of this host left are removed at the next
// open: one of a dead PID with the module's files goes, one holding
// anything more, another host's and a live process's stay.
static void test_stale(void) {
    size_t off[NU], total;
    units(off, &total);
    Offload *o;
    Err e;
    EXPECT(offload_open(&o, base, "--dir", 0, 2, names, off, unit_n, NU, 0, &e) == 0, "%s", e.msg);
    if (!o) return;
    char host[128] = "";   // this host's tag, from the directory's name: offload-r00000-HOST-pPID.XXXXXX
    const char *h = strstr(offload_dir(o), "/offload-r00000-") + 16, *p = strstr(h, "-p");
    snprintf(host, sizeof host, "%.*s", (int)(p - h), h);
    offload_close(o);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char gone[1000], full[1000], other[1000], live[1000], f[1100];
    snprintf(gone, sizeof gone, "%s/offload-r00000-%s-p%d.AAAAAA", base, host, (int)dead);
    snprintf(full, sizeof full, "%s/offload-r00001-%s-p%d.BBBBBB", base, host, (int)dead);
    snprintf(other, sizeof other, "%s/offload-r00000-%sx-p%d.CCCCCC", base, host, (int)dead);
    snprintf(live, sizeof live, "%s/offload-r00000-%s-p%d.DDDDDD", base, host, (int)getppid());
    const char *dirs[4] = {gone, full, other, live};
    for (int i = 0; i < 4; i++) {
        mkdir(dirs[i], 0700);
        for (int k = 0; k < 2; k++) {
            snprintf(f, sizeof f, "%s/%s.f32", dirs[i], names[k]);
            FILE *w = fopen(f, "w");
            if (w) fclose(w);
        }
    }
    snprintf(f, sizeof f, "%s/notes.txt", full);
    FILE *w = fopen(f, "w");
    if (w) fclose(w);
    EXPECT(offload_open(&o, base, "--dir", 0, 2, names, off, unit_n, NU, 0, &e) == 0, "%s", e.msg);
    offload_close(o);
    struct stat sb;
    EXPECT(stat(gone, &sb) != 0, "%s removed", gone);
    EXPECT(stat(full, &sb) == 0 && stat(other, &sb) == 0 && stat(live, &sb) == 0, "the others stay");
    for (int i = 1; i < 4; i++) {
        for (int k = 0; k < 2; k++) {
            snprintf(f, sizeof f, "%s/%s.f32", dirs[i], names[k]);
            unlink(f);
        }
        rmdir(dirs[i]);
    }
    snprintf(f, sizeof f, "%s/notes.txt", full);
    unlink(f);
    rmdir(full);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/tsr_offload_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(base)) { perror("mkdtemp"); return 1; }
    RUN(test_passes);
    RUN(test_truncated_and_kept);
    RUN(test_bad_base);
    RUN(test_stale);
    rmdir(base);
    return test_finish();
}
