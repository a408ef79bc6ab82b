/*
 * Pool-adjacent-violators for hardgrad's soft sorts, one row after another, in double
 * precision (compiled on first use by hardgrad._core.native and called through ctypes;
 * without a C compiler hardgrad uses the batched tensor passes of sorting/_pav.py, which
 * find the same blocks).
 *
 * Paper: Best & Chakravarti (1990), "Active set algorithms for isotonic regression; a
 * unifying framework", https://doi.org/10.1007/BF01580873.
 *
 * The decreasing isotonic problems of hardgrad/sorting/_isotonic.py, per row of n entries:
 *   l2: v = argmin_{v decreasing} 1/2 |v - (s - w)|^2, block value mean_B(s) - mean_B(w);
 *   kl: v = argmin_{v decreasing} <exp(s - v), 1> + <exp(w), v>,
 *       block value lse_B(s) - lse_B(w)  (lse: log-sum-exp).
 * A block is merged with the one before it while the earlier block's value is below its
 * own (strictly: adjacent blocks of equal value stay apart), as the sequential scan in
 * sorting/_pav.py (l2 with the same arithmetic: sums of s 2^-k - w 2^-k with 2^k > 2n,
 * compared as means, so the same blocks; kl below).
 *
 * Outputs per entry: its block's first entry, for kl its weight in its block's statistics
 * (the block's softmax of s and of w, what the backward needs), and optionally, with the
 * block statistics (means for l2, log-sum-exps for kl: a block of one gives the entry
 * itself, bit for bit)
 *   primal: ((s - ref_s) - dev_s) + stat_w  (= s - v; l2: ref_s = stat_s, dev_s = 0; kl:
 *           stat_s = ref_s + dev_s with ref_s the block's or row's largest entry of s, so
 *           that equal entries of 1e16 keep their -log|B|), or
 *   dual:   stat_s - stat_w         (= v),
 * computed in double and rounded once to the input's type (or left in double, for the
 * kl soft rank's exp(s - v)), optionally written through a permutation (out[perm[i]] =
 * entry i's: the soft rank's return to the input's order).
 *
 * kl in two forms with the same solution: where a row's s and w each span at most
 * LINEAR_SPAN, in the linear domain (e^(x - max x) per entry, given by the caller, who
 * computes them vectorised, or computed here; block sums compared by cross-multiplication:
 * no exp or log per merge); elsewhere (wide rows, whose
 * blocks are mostly single entries) with log-add-exp merges and shifted block sums. The
 * two may split a block differently only where two adjacent blocks' values tie to rounding,
 * which changes no value.
 *
 * Backward (the blocks held fixed): with G_B the sum of the incoming gradient g over the
 * block and p_j the weight of entry j in its block's statistic (1/|B| for l2, the saved
 * softmax weights for kl):
 *   primal: grad_s_j = g_j - ps_j G_B,  grad_w_j = pw_j G_B;
 *   dual:   grad_s_j = ps_j G_B,        grad_w_j = -pw_j G_B;
 *   exp (mode 3, the kl soft rank exp(s - v)): as primal with g_j times the output,
 * read and written through the same permutation as the forward's output.
 *
 * Each function comes in a float and a double version (hg_pav_forward_f32, ..._f64): the
 * input's type, read and written as such, every operation in double. Rows are n entries
 * apart in the outputs and g; s, w, es, ew take a row stride (0: one row shared by all).
 * Every function returns 0, or -1 when it cannot allocate its scratch memory.
 */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Widest span (max - min) of a row's s or w for the linear-domain kl form: every term
 * e^(x - max) >= e^-300 and every product of two block sums stays a normal double. */
#define LINEAR_SPAN 300.0

static double log_add_exp(double a, double b) {
    if (a < b) {
        double t = a;
        a = b;
        b = t;
    }
    return a + log1p(exp(b - a));
}

/* The smallest power of two above m (1 for m < 1): Python's 2 ** m.bit_length(). */
static double power_of_two_above(int64_t m) {
    double p = 1.0;
    while (p <= (double)m)
        p *= 2.0;
    return p;
}

/* Scratch memory of one call: per-row stacks and per-entry terms. */
typedef struct {
    double *top, *bottom, *key, *es, *ew;
    int64_t *counts;
} scratch;

static void release(scratch *m) {
    free(m->top);
    free(m->bottom);
    free(m->key);
    free(m->es);
    free(m->ew);
    free(m->counts);
}

static int allocate(scratch *m, int64_t n) {
    size_t d = sizeof(double) * (size_t)n;
    m->top = malloc(d);
    m->bottom = malloc(d);
    m->key = malloc(d);
    m->es = malloc(d);
    m->ew = malloc(d);
    m->counts = malloc(sizeof(int64_t) * (size_t)n);
    if (!m->top || !m->bottom || !m->key || !m->es || !m->ew || !m->counts) {
        release(m);
        return -1;
    }
    return 0;
}

#define DEFINE_PAV(T, SUFFIX)                                                                 \
                                                                                              \
    /* l2 blocks of one row (key: each block's mean, computed once per block). */             \
    static int64_t l2_blocks_##SUFFIX(int64_t n, const T *s, const T *w, double scale,        \
                                      scratch *m) {                                           \
        int64_t blocks = 0;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            double t = (double)s[i] * scale - (double)w[i] * scale, mean = t;                 \
            int64_t c = 1;                                                                    \
            while (blocks > 0 && m->key[blocks - 1] < mean) {                                 \
                blocks--;                                                                     \
                t = t + m->top[blocks];                                                       \
                c += m->counts[blocks];                                                       \
                mean = t / (double)c;                                                         \
            }                                                                                 \
            m->top[blocks] = t;                                                               \
            m->key[blocks] = mean;                                                            \
            m->counts[blocks] = c;                                                            \
            blocks++;                                                                         \
        }                                                                                     \
        return blocks;                                                                        \
    }                                                                                         \
                                                                                              \
    /* kl blocks of one row in the log domain (top, bottom: log-sum-exps of s and w). */      \
    static int64_t kl_log_blocks_##SUFFIX(int64_t n, const T *s, const T *w, scratch *m) {    \
        int64_t blocks = 0;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            double t = (double)s[i], b = (double)w[i];                                        \
            int64_t c = 1;                                                                    \
            while (blocks > 0 && m->top[blocks - 1] - m->bottom[blocks - 1] < t - b) {        \
                blocks--;                                                                     \
                t = log_add_exp(t, m->top[blocks]);                                           \
                b = log_add_exp(b, m->bottom[blocks]);                                        \
                c += m->counts[blocks];                                                       \
            }                                                                                 \
            m->top[blocks] = t;                                                               \
            m->bottom[blocks] = b;                                                            \
            m->counts[blocks] = c;                                                            \
            blocks++;                                                                         \
        }                                                                                     \
        return blocks;                                                                        \
    }                                                                                         \
                                                                                              \
    /* kl blocks of one row in the linear domain (top, bottom: sums of es and ew); the     */ \
    /* value log(top) - log(bottom) + const is compared by cross-multiplication.           */ \
    static int64_t kl_linear_blocks_##SUFFIX(int64_t n, const double *es, const double *ew,   \
                                             scratch *m) {                                    \
        int64_t blocks = 0;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            double t = es[i], b = ew[i];                                                      \
            int64_t c = 1;                                                                    \
            while (blocks > 0 && m->top[blocks - 1] * b < t * m->bottom[blocks - 1]) {        \
                blocks--;                                                                     \
                t = t + m->top[blocks];                                                       \
                b = b + m->bottom[blocks];                                                    \
                c += m->counts[blocks];                                                       \
            }                                                                                 \
            m->top[blocks] = t;                                                               \
            m->bottom[blocks] = b;                                                            \
            m->counts[blocks] = c;                                                            \
            blocks++;                                                                         \
        }                                                                                     \
        return blocks;                                                                        \
    }                                                                                         \
                                                                                              \
    /* max - min of x[0..n) and its max (an infinite span for a non-finite entry). */         \
    static double span_##SUFFIX(const T *x, int64_t n, double *high) {                        \
        double lo = (double)x[0], hi = lo;                                                    \
        for (int64_t i = 1; i < n; i++) {                                                     \
            double v = (double)x[i];                                                          \
            lo = v < lo ? v : lo;                                                             \
            hi = v > hi ? v : hi;                                                             \
        }                                                                                     \
        *high = hi;                                                                           \
        double span = hi - lo;                                                                \
        return isfinite(span) ? span : INFINITY;                                              \
    }                                                                                         \
                                                                                              \
    /* Each block statistic is returned as ref + *dev, so that s_i - stat is computed as    */ \
    /* (s_i - ref) - dev. kl: ref is the block's (or row's) largest entry, which dominates */ \
    /* the log-sum-exp: nothing is lost to cancellation when the entries are large and     */ \
    /* close (1e16 and 1e16: 0 - log 2, not 1e16 - 1e16). l2: ref is the mean itself (a    */ \
    /* shift by an entry would cancel in blocks holding both +1e300 and -1e300).           */ \
                                                                                              \
    /* A block's mean of x[0..c): sums of x / 2^k, then times 2^k / c (_isotonic.py's).    */ \
    static double block_mean_##SUFFIX(const T *x, int64_t c, double power, double *dev) {     \
        *dev = 0.0;                                                                           \
        if (c == 1)                                                                           \
            return (double)x[0];                                                              \
        double sum = 0.0, inverse = 1.0 / power;                                              \
        for (int64_t i = 0; i < c; i++)                                                       \
            sum += (double)x[i] * inverse;                                                    \
        return sum * (power / (double)c);                                                     \
    }                                                                                         \
                                                                                              \
    /* A block's log-sum-exp of x[0..c), shifted by its maximum; weights: its softmax.     */ \
    static double block_lse_##SUFFIX(const T *x, int64_t c, double *weight, double *dev) {    \
        if (c == 1) {                                                                         \
            if (weight)                                                                       \
                weight[0] = 1.0;                                                              \
            *dev = 0.0;                                                                       \
            return (double)x[0];                                                              \
        }                                                                                     \
        double top = -INFINITY, sum = 0.0;                                                    \
        for (int64_t i = 0; i < c; i++)                                                       \
            top = (double)x[i] > top ? (double)x[i] : top;                                    \
        for (int64_t i = 0; i < c; i++)                                                       \
            sum += exp((double)x[i] - top);                                                   \
        if (weight) /* e^(x - top) / sum: no cancellation against the log-sum-exp */          \
            for (int64_t i = 0; i < c; i++)                                                   \
                weight[i] = exp((double)x[i] - top) / sum;                                    \
        *dev = log(sum);                                                                      \
        return top;                                                                           \
    }                                                                                         \
                                                                                              \
    /* From linear-domain block sums: the log-sum-exp anchor + log(sum); weights e / sum. */  \
    static double block_linear_##SUFFIX(const T *x, const double *e, int64_t c, double anchor, \
                                        double sum, double *weight, double *dev) {            \
        if (c == 1) {                                                                         \
            if (weight)                                                                       \
                weight[0] = 1.0;                                                              \
            *dev = 0.0;                                                                       \
            return (double)x[0];                                                              \
        }                                                                                     \
        if (weight)                                                                           \
            for (int64_t i = 0; i < c; i++)                                                   \
                weight[i] = e[i] / sum;                                                       \
        *dev = log(sum);                                                                      \
        return anchor;                                                                        \
    }                                                                                         \
                                                                                              \
    /* mode: 0 no value output, 1 primal, 2 dual: rounded to T in out, or in double in    */ \
    /* out64 (either may be NULL); perm (may be NULL): entry i's value lands at perm[i].  */ \
    /* weight_s, weight_w (kl only) may be NULL. es, ew (kl, may be NULL): the terms      */ \
    /* e^(x - max of x's row), computed by the caller (vectorised), with row strides.     */ \
    int hg_pav_forward_##SUFFIX(int kl, int mode, int64_t rows, int64_t n, const T *s,        \
                                int64_t s_stride, const T *w, int64_t w_stride,               \
                                const double *es, int64_t es_stride, const double *ew,        \
                                int64_t ew_stride, const int64_t *perm, int64_t *start,       \
                                double *weight_s, double *weight_w, T *out, double *out64) {  \
        if (rows <= 0 || n <= 0)                                                              \
            return 0;                                                                         \
        scratch m;                                                                            \
        if (allocate(&m, n))                                                                  \
            return -1;                                                                        \
        /* l2: 2^-k with 2^k > 2n keeps every block's sum finite (sorting/_pav.py). */        \
        double scale = 1.0 / power_of_two_above(2 * n);                                       \
        /* segment means: the smallest power of two above n - 1 (sorting/_isotonic.py). */    \
        double power = power_of_two_above(n - 1);                                             \
        /* A row shared by all rows (stride 0: rho in the soft sorts) has its span and    */ \
        /* terms computed once.                                                           */ \
        double span_s = 0.0, span_w = 0.0, as = 0.0, aw = 0.0;                                \
        int es_ready = 0, ew_ready = 0;                                                       \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const T *sr = s + r * s_stride, *wr = w + r * w_stride;                           \
            int64_t o = r * n, blocks;                                                        \
            int linear = 0;                                                                   \
            const double *esr = m.es, *ewr = m.ew;                                            \
            if (!kl) {                                                                        \
                blocks = l2_blocks_##SUFFIX(n, sr, wr, scale, &m);                            \
            } else {                                                                          \
                if (r == 0 || s_stride)                                                       \
                    span_s = span_##SUFFIX(sr, n, &as);                                       \
                if (r == 0 || w_stride)                                                       \
                    span_w = span_##SUFFIX(wr, n, &aw);                                       \
                linear = span_s <= LINEAR_SPAN && span_w <= LINEAR_SPAN;                      \
                if (linear) {                                                                 \
                    if (es)                                                                   \
                        esr = es + r * es_stride;                                             \
                    else if (!es_ready)                                                       \
                        for (int64_t i = 0; i < n; i++)                                       \
                            m.es[i] = exp((double)sr[i] - as);                                \
                    if (ew)                                                                   \
                        ewr = ew + r * ew_stride;                                             \
                    else if (!ew_ready)                                                       \
                        for (int64_t i = 0; i < n; i++)                                       \
                            m.ew[i] = exp((double)wr[i] - aw);                                \
                    es_ready = s_stride == 0;                                                 \
                    ew_ready = w_stride == 0;                                                 \
                    blocks = kl_linear_blocks_##SUFFIX(n, esr, ewr, &m);                      \
                } else {                                                                      \
                    blocks = kl_log_blocks_##SUFFIX(n, sr, wr, &m);                           \
                }                                                                             \
            }                                                                                 \
            int64_t first = 0;                                                                \
            for (int64_t k = 0; k < blocks; k++) {                                            \
                int64_t c = m.counts[k];                                                      \
                double ms = 0.0, ds = 0.0, mw = 0.0, dw = 0.0; /* stat = m + d */             \
                double *ps = weight_s ? weight_s + o + first : NULL;                          \
                double *pw = weight_w ? weight_w + o + first : NULL;                          \
                if (!kl) {                                                                    \
                    if (mode) {                                                               \
                        ms = block_mean_##SUFFIX(sr + first, c, power, &ds);                  \
                        mw = block_mean_##SUFFIX(wr + first, c, power, &dw);                  \
                    }                                                                         \
                } else if (linear) {                                                          \
                    ms = block_linear_##SUFFIX(sr + first, esr + first, c, as, m.top[k], ps,  \
                                               &ds);                                          \
                    mw = block_linear_##SUFFIX(wr + first, ewr + first, c, aw, m.bottom[k],   \
                                               pw, &dw);                                      \
                } else {                                                                      \
                    ms = block_lse_##SUFFIX(sr + first, c, ps, &ds);                          \
                    mw = block_lse_##SUFFIX(wr + first, c, pw, &dw);                          \
                }                                                                             \
                double stat_w = mw + dw;                                                      \
                for (int64_t i = first; i < first + c; i++) {                                 \
                    start[o + i] = first;                                                     \
                    if (!mode)                                                                \
                        continue;                                                             \
                    double v = mode == 2 ? (ms + ds) - stat_w                                 \
                                         : (((double)sr[i] - ms) - ds) + stat_w;              \
                    int64_t at = o + (perm ? perm[o + i] : i);                                \
                    if (out)                                                                  \
                        out[at] = (T)v;                                                       \
                    if (out64)                                                                \
                        out64[at] = v;                                                        \
                }                                                                             \
                first += c;                                                                   \
            }                                                                                 \
        }                                                                                     \
        release(&m);                                                                          \
        return 0;                                                                             \
    }                                                                                         \
                                                                                              \
    /* mode: 1 primal, 2 dual, 3 exp(primal) (then out: the forward's output, whose     */ \
    /* derivative multiplies g); grad_s or grad_w may be NULL (not needed). kl: weight_s,  */ \
    /* weight_w are hg_pav_forward's (NULL where that gradient is not needed). perm (may   */ \
    /* be NULL): g, out and the gradients at perm[i] belong to entry i.                     */ \
    int hg_pav_backward_##SUFFIX(int kl, int mode, int64_t rows, int64_t n,                   \
                                 const int64_t *start, const double *weight_s,                \
                                 const double *weight_w, const int64_t *perm, const T *g,     \
                                 const T *out, T *grad_s, T *grad_w) {                        \
        double *scratch_g = n > 0 ? malloc(sizeof(double) * (size_t)n) : NULL;                \
        if (n > 0 && !scratch_g)                                                              \
            return -1;                                                                        \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            int64_t o = r * n, first = 0;                                                     \
            for (int64_t i = 0; i < n; i++) {                                                 \
                int64_t at = o + (perm ? perm[o + i] : i);                                    \
                scratch_g[i] = mode == 3 ? (double)g[at] * (double)out[at] : (double)g[at];   \
            }                                                                                 \
            while (first < n) {                                                               \
                int64_t end = first + 1;                                                      \
                while (end < n && start[o + end] == first)                                    \
                    end++;                                                                    \
                double total = 0.0;                                                           \
                for (int64_t i = first; i < end; i++)                                         \
                    total += scratch_g[i];                                                    \
                double share = total / (double)(end - first);                                 \
                for (int64_t i = first; i < end; i++) {                                       \
                    int64_t at = o + (perm ? perm[o + i] : i);                                \
                    if (grad_s) {                                                             \
                        double part = kl ? weight_s[o + i] * total : share;                   \
                        grad_s[at] = (T)(mode == 2 ? part : scratch_g[i] - part);             \
                    }                                                                         \
                    if (grad_w) {                                                             \
                        double part = kl ? weight_w[o + i] * total : share;                   \
                        grad_w[at] = (T)(mode == 2 ? -part : part);                           \
                    }                                                                         \
                }                                                                             \
                first = end;                                                                  \
            }                                                                                 \
        }                                                                                     \
        free(scratch_g);                                                                      \
        return 0;                                                                             \
    }

DEFINE_PAV(float, f32)
DEFINE_PAV(double, f64)

/*
 * The sort before the isotonic step: each row sorted in decreasing order, stably (equal
 * entries keep their order, as torch.sort on the CPU), by a least-significant-digit radix
 * sort of 8-bit digits on keys that order like the floats (the sign bit flipped for
 * positive numbers, all bits for negative ones, then all bits again for decreasing order;
 * -0.0 is keyed as +0.0 and every NaN as the largest value, as torch.sort treats them).
 * A digit that is the same for every key of the row is skipped. values[i] = x[indices[i]].
 * Returns 0, or -1 when it cannot allocate its scratch memory.
 */

#define DEFINE_SORT(T, U, BITS, SUFFIX)                                                       \
    static U sort_key_##SUFFIX(T value) {                                                     \
        U u;                                                                                  \
        if (value != value)                                                                   \
            return 0; /* NaN: the largest, first in decreasing order */                       \
        if (value == 0)                                                                       \
            value = 0; /* -0.0 as +0.0 */                                                     \
        memcpy(&u, &value, sizeof u);                                                         \
        U sign = (U)1 << (BITS - 1);                                                          \
        u = (u & sign) ? ~u : (u | sign); /* increasing with the value */                     \
        return ~u;                        /* decreasing */                                    \
    }                                                                                         \
                                                                                              \
    int hg_sort_descending_##SUFFIX(int64_t rows, int64_t n, const T *x, int64_t x_stride,    \
                                    T *values, int64_t *indices) {                            \
        if (rows <= 0 || n <= 0)                                                              \
            return 0;                                                                         \
        U *key = malloc(sizeof(U) * (size_t)n), *key2 = malloc(sizeof(U) * (size_t)n);        \
        int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);                                   \
        int64_t *idx2 = malloc(sizeof(int64_t) * (size_t)n);                                  \
        uint32_t(*count)[256] = malloc(sizeof(uint32_t[256]) * (BITS / 8));                   \
        if (!key || !key2 || !idx || !idx2 || !count) {                                       \
            free(key);                                                                        \
            free(key2);                                                                       \
            free(idx);                                                                        \
            free(idx2);                                                                       \
            free(count);                                                                      \
            return -1;                                                                        \
        }                                                                                     \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const T *xr = x + r * x_stride;                                                   \
            memset(count, 0, sizeof(uint32_t[256]) * (BITS / 8));                             \
            for (int64_t i = 0; i < n; i++) {                                                 \
                U k = sort_key_##SUFFIX(xr[i]);                                               \
                key[i] = k;                                                                   \
                idx[i] = i;                                                                   \
                for (int d = 0; d < BITS / 8; d++)                                            \
                    count[d][(k >> (8 * d)) & 255]++;                                         \
            }                                                                                 \
            U *from = key, *to = key2;                                                        \
            int64_t *ifrom = idx, *ito = idx2;                                                \
            for (int d = 0; d < BITS / 8; d++) {                                              \
                uint32_t *c = count[d];                                                       \
                if ((int64_t)c[(from[0] >> (8 * d)) & 255] == n)                             \
                    continue; /* one digit for the whole row */                               \
                uint32_t total = 0;                                                           \
                for (int b = 0; b < 256; b++) {                                               \
                    uint32_t here = c[b];                                                     \
                    c[b] = total;                                                             \
                    total += here;                                                            \
                }                                                                             \
                for (int64_t i = 0; i < n; i++) {                                             \
                    int64_t at = c[(from[i] >> (8 * d)) & 255]++;                             \
                    to[at] = from[i];                                                         \
                    ito[at] = ifrom[i];                                                       \
                }                                                                             \
                U *t = from;                                                                  \
                from = to;                                                                    \
                to = t;                                                                       \
                int64_t *it = ifrom;                                                          \
                ifrom = ito;                                                                  \
                ito = it;                                                                     \
            }                                                                                 \
            T *vr = values + r * n;                                                           \
            int64_t *ir = indices + r * n;                                                    \
            for (int64_t i = 0; i < n; i++) {                                                 \
                ir[i] = ifrom[i];                                                             \
                vr[i] = xr[ifrom[i]];                                                         \
            }                                                                                 \
        }                                                                                     \
        free(key);                                                                            \
        free(key2);                                                                           \
        free(idx);                                                                            \
        free(idx2);                                                                           \
        free(count);                                                                          \
        return 0;                                                                             \
    }

DEFINE_SORT(float, uint32_t, 32, f32)
DEFINE_SORT(double, uint64_t, 64, f64)
