// The llama.cpp reference of tests/fixtures/gemma3_reference.json, for when the llama-tokenize /
// llama-perplexity binaries are not built: the same library calls they make, against libllama
// (vendor/llama.cpp of PyPI llama-cpp-python 0.3.36), with llama-perplexity's convention.
//   tokenize MODEL FILE 0|1   -> the ids of FILE's bytes, BOS added as the model asks, special
//                               tokens parsed when the last argument is 1 (llama-tokenize --ids)
//   ppl MODEL FILE CTX [N]    -> per-chunk mean NLL and the running PPL, as llama-perplexity
//                               -c CTX -b CTX -t 2 prints them ([k]ppl), for the first N chunks
//   logits MODEL IDS_CSV      -> the logits of every position of the token ids IDS_CSV (comma-
//                               separated, fed as they are: no BOS added) decoded in one batch, one
//                               line a position, the vocabulary's floats space-separated (%.9g);
//                               f32 KV cache, no flash attention, CPU, 2 threads
//                               (scripts/gen-gguf-llama-logits.py)
//   version                   -> ggml's version and commit of the libllama it runs against
// Build: gcc -O2 -I$L/include -I$L/ggml/include llama_ref.c -L$B -lllama -lggml-base -Wl,-rpath,$B -lm
//   ($L the llama.cpp source, $B the folder of libllama.so: scripts/build-llama-cpp.sh DEST gives
//   L=DEST/src, B=DEST/lib)
#include "llama.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char * slurp(const char * path, long * n) {
    FILE * f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
    char * b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != (size_t) *n) { perror(path); exit(1); }
    b[*n] = 0; fclose(f);
    return b;
}

static int tokenize(const struct llama_vocab * v, const char * text, long n, int parse_special, llama_token ** out) {
    int cap = n + 16;
    *out = malloc(sizeof(llama_token) * cap);
    int k = llama_tokenize(v, text, n, *out, cap, llama_vocab_get_add_bos(v), parse_special);
    if (k < 0) { cap = -k; *out = realloc(*out, sizeof(llama_token) * cap); k = llama_tokenize(v, text, n, *out, cap, llama_vocab_get_add_bos(v), parse_special); }
    return k;
}

// Every position's logits of `ids`, one batch; exact f32 arithmetic where llama.cpp offers it.
static int logits_cmd(const char * path, const char * csv) {
    int cap = 16, n = 0;
    llama_token * ids = malloc(sizeof(llama_token) * cap);
    for (const char * p = csv; *p;) {
        char * end;
        long v = strtol(p, &end, 10);
        if (end == p) { fprintf(stderr, "bad id list at \"%s\"\n", p); return 2; }
        if (n == cap) { cap *= 2; ids = realloc(ids, sizeof(llama_token) * cap); }
        ids[n++] = (llama_token) v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') { fprintf(stderr, "bad id list at \"%s\"\n", end); return 2; }
    }
    if (n == 0) { fprintf(stderr, "no ids\n"); return 2; }
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false;  // llama-perplexity --no-repack (see main)
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) { fprintf(stderr, "id %d out of the vocabulary (%d)\n", ids[i], n_vocab); return 2; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n; cp.n_batch = n; cp.n_ubatch = n; cp.n_seq_max = 1;
    cp.n_threads = 2; cp.n_threads_batch = 2;
    // The default KV cache is f16: keep keys and values in f32, as the reference computes them.
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.offload_kqv = false; cp.op_offload = false;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot make a context for %s\n", path); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int k = 0; k < n; k++) {
        b.token[k] = ids[k]; b.pos[k] = k; b.n_seq_id[k] = 1; b.seq_id[k][0] = 0; b.logits[k] = 1;
    }
    b.n_tokens = n;
    int rc = llama_decode(ctx, b);
    if (rc) { fprintf(stderr, "decode failed: %d\n", rc); return 1; }
    for (int i = 0; i < n; i++) {
        const float * lg = llama_get_logits_ith(ctx, i);
        if (!lg) { fprintf(stderr, "no logits for position %d\n", i); return 1; }
        for (int j = 0; j < n_vocab; j++) printf(j ? " %.9g" : "%.9g", lg[j]);
        printf("\n");
    }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int main(int argc, char ** argv) {
    if (argc == 2 && strcmp(argv[1], "version") == 0) {
        printf("ggml %s (commit %s)\n", ggml_version(), ggml_commit());
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "logits") == 0) {
        llama_backend_init();
        return logits_cmd(argv[2], argv[3]);
    }
    if (argc < 5) { fprintf(stderr, "usage: tokenize MODEL FILE 0|1 | ppl MODEL FILE CTX [N] | logits MODEL IDS_CSV | version\n"); return 2; }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    int ppl = strcmp(argv[1], "ppl") == 0;
    mp.vocab_only = !ppl;
    // No extra buffer types (llama-perplexity --no-repack): on this machine's AMX-capable Xeon,
    // ggml's AMX matmul segfaults inside the container.
    mp.use_extra_bufts = false;
    struct llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    long n; char * text = slurp(argv[3], &n);
    llama_token * toks;
    if (!ppl) {
        int k = tokenize(vocab, text, n, atoi(argv[4]), &toks);
        printf("[");
        for (int i = 0; i < k; i++) printf(i ? ", %d" : "%d", toks[i]);
        printf("]\n");
        return 0;
    }
    // llama-perplexity strips one trailing newline, tokenizes with BOS, no special parsing.
    if (n > 0 && text[n - 1] == '\n') text[--n] = 0;
    int n_tok = tokenize(vocab, text, n, 0, &toks);
    int ctx_n = atoi(argv[4]);
    int chunks = n_tok / ctx_n;
    if (argc > 5 && atoi(argv[5]) < chunks) chunks = atoi(argv[5]);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = ctx_n; cp.n_batch = ctx_n; cp.n_ubatch = ctx_n < 512 ? ctx_n : 512; cp.n_seq_max = 1;
    cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    const int n_vocab = llama_vocab_n_tokens(vocab), first = ctx_n / 2;
    const int add_bos = llama_vocab_get_add_bos(vocab);
    double nll = 0; int count = 0;
    fprintf(stderr, "%d tokens, %d chunks\n", n_tok, chunks);
    for (int c = 0; c < chunks; c++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        struct llama_batch b = llama_batch_init(ctx_n, 0, 1);
        for (int k = 0; k < ctx_n; k++) {
            b.token[k] = (k == 0 && add_bos) ? llama_vocab_bos(vocab) : toks[c * ctx_n + k];
            b.pos[k] = k; b.n_seq_id[k] = 1; b.seq_id[k][0] = 0; b.logits[k] = k >= first;
        }
        b.n_tokens = ctx_n;
        int rc = llama_decode(ctx, b);
        if (rc) { fprintf(stderr, "decode failed: %d\n", rc); return 1; }
        double chunk = 0;
        for (int i = first; i < ctx_n - 1; i++) {
            const float * lg = llama_get_logits_ith(ctx, i);
            if (!lg) { fprintf(stderr, "no logits for position %d\n", i); return 1; }
            int tok = toks[c * ctx_n + i + 1];
            // llama-perplexity's log_softmax: float max, double sum of expf.
            float mx = lg[0];
            for (int j = 1; j < n_vocab; j++) if (lg[j] > mx) mx = lg[j];
            double s = 0;
            for (int j = 0; j < n_vocab; j++) s += expf(lg[j] - mx);
            chunk += -(lg[tok] - mx - log(s));
        }
        nll += chunk; count += ctx_n - 1 - first;
        printf("chunk %d mean_nll %.6f running_ppl %.6f\n", c + 1, chunk / (ctx_n - 1 - first), exp(nll / count));
        fflush(stdout);
        llama_batch_free(b);
    }
    printf("final ppl %.6f over %d chunks\n", exp(nll / count), chunks);
    return 0;
}
