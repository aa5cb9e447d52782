#!/usr/bin/env python3
"""Writes the small seed corpora of the fuzz targets (committed under fuzz/corpus/)."""
import json, os, struct

here = os.path.dirname(os.path.abspath(__file__))

def put_str(s):
    b = s.encode()
    return struct.pack('<Q', len(b)) + b

class Gguf:
    def __init__(self):
        self.kv, self.n_kv, self.infos, self.n_t, self.data = b'', 0, b'', 0, b''
    def kv_raw(self, k, ty, v):
        self.kv += put_str(k) + struct.pack('<I', ty) + v; self.n_kv += 1
    def s(self, k, v): self.kv_raw(k, 8, put_str(v))
    def u32(self, k, v): self.kv_raw(k, 4, struct.pack('<I', v))
    def f32(self, k, v): self.kv_raw(k, 6, struct.pack('<f', v))
    def sarr(self, k, vs): self.kv_raw(k, 9, struct.pack('<IQ', 8, len(vs)) + b''.join(put_str(v) for v in vs))
    def uarr(self, k, vs): self.kv_raw(k, 9, struct.pack('<IQ', 4, len(vs)) + b''.join(struct.pack('<I', v) for v in vs))
    def tensor(self, name, ne, vals):
        self.infos += put_str(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', d) for d in ne)
        self.infos += struct.pack('<IQ', 0, len(self.data))
        self.data += b''.join(struct.pack('<f', v) for v in vals)
        while len(self.data) % 32: self.data += b'\0'
        self.n_t += 1
    def bytes(self):
        b = b'GGUF' + struct.pack('<IQQ', 3, self.n_t, self.n_kv) + self.kv + self.infos
        while len(b) % 32: b += b'\0'
        return b + self.data

def tiny_gguf(pre='smollm'):
    """A runnable llama GGUF: 1 layer, d_model 8, 2 heads, vocab 8, with a byte-level tokenizer."""
    g = Gguf()
    g.s('general.architecture', 'llama'); g.s('general.name', 'tiny')
    for k, v in [('block_count', 1), ('embedding_length', 8), ('attention.head_count', 2), ('attention.head_count_kv', 1),
                 ('feed_forward_length', 16), ('context_length', 64)]:
        g.u32('llama.' + k, v)
    g.f32('llama.attention.layer_norm_rms_epsilon', 1e-5); g.f32('llama.rope.freq_base', 10000.0)
    g.s('tokenizer.ggml.model', 'gpt2'); g.s('tokenizer.ggml.pre', pre)
    toks = ['a', 'b', 'c', 'Ġ', 'ab', 'Ġa', '<s>', '.']
    g.sarr('tokenizer.ggml.tokens', toks); g.sarr('tokenizer.ggml.merges', ['a b', 'Ġ a'])
    g.uarr('tokenizer.ggml.token_type', [1, 1, 1, 1, 1, 1, 3, 1]); g.u32('tokenizer.ggml.bos_token_id', 6)
    d, f, v, kvd = 8, 16, 8, 4
    w = lambda n: [((i * 37) % 11 - 5) / 20 for i in range(n)]
    g.tensor('token_embd.weight', [d, v], w(d * v)); g.tensor('output_norm.weight', [d], [1.0] * d)
    g.tensor('blk.0.attn_norm.weight', [d], [1.0] * d); g.tensor('blk.0.ffn_norm.weight', [d], [1.0] * d)
    g.tensor('blk.0.attn_q.weight', [d, d], w(d * d)); g.tensor('blk.0.attn_k.weight', [d, kvd], w(d * kvd))
    g.tensor('blk.0.attn_v.weight', [d, kvd], w(d * kvd)); g.tensor('blk.0.attn_output.weight', [d, d], w(d * d))
    g.tensor('blk.0.ffn_gate.weight', [d, f], w(d * f)); g.tensor('blk.0.ffn_up.weight', [d, f], w(d * f))
    g.tensor('blk.0.ffn_down.weight', [f, d], w(d * f))
    return g.bytes()

def write(target, name, data):
    d = os.path.join(here, 'corpus', target); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as fh: fh.write(data if isinstance(data, bytes) else data.encode())

write('gguf', 'tiny-smollm.gguf', tiny_gguf())
write('gguf', 'tiny-llama3.gguf', tiny_gguf('llama3'))
with open(os.path.join(here, '../tests/fixtures/hf_tiny/llama/config.json')) as fh: write('hf_config', 'llama.json', fh.read())
with open(os.path.join(here, '../tests/fixtures/hf_tiny/gpt2/config.json')) as fh: write('hf_config', 'gpt2.json', fh.read())
word = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, ",": 3}, "unk_token": "[UNK]"}}
write('tokenizer_json', 'wordlevel.json', json.dumps(word))
bpe = dict(word, normalizer=None, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
           model={"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "He": 4, "ll": 5}, "merges": [["H", "e"], ["l", "l"]]})
write('tokenizer_json', 'bpe.json', json.dumps(bpe))
write('text', 'plain.txt', 'PRIDE AND PREJUDICE\n\nIt is a truth universally acknowledged.\n')
write('text', 'utf8.txt', 'naïve 東京 — «quotes»\r\n')
write('forward', 'dense.bin', b'\x00' + b'It is a truth universally acknowledged, that a single man in possession of a good fortune.')
write('forward', 'topk.bin', b'\x06' + b'The cat sat on the mat. ' * 6)
cfg = {"format": "focus-lens-adapter", "format_version": 1, "groups": 4, "d_g": 16, "tau": 0.1, "sinkhorn_iters": 10, "window": 4,
       "gate": "log", "lambda": 10.0, "log_eps": 1e-6, "top_k": 2, "causal_sinkhorn": False, "score": "dot",
       "router_input": "attention input after the layer's norm", "base_model": {}, "init": "seed"}
write('adapter', 'config.bin', b'\x01' + json.dumps(cfg).encode())
write('adapter', 'config-raw.bin', b'\x00' + json.dumps(cfg).encode())
# tokenizer_gguf takes `arbitrary` structures: a few raw byte strings seed it.
write('tokenizer_gguf', 'a.bin', bytes(range(64)))
write('safetensors_model', 'empty-header.bin', struct.pack('<Q', 2) + b'{}')
chatml = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
write('chat_template', 'chatml.txt', 'Hi!\n' + chatml)
write('chat_template', 'gemma.txt', "Hello\n{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")
write('chat_template', 'raise.txt', "x\n{% if messages[0]['role'] != 'system' %}{{ raise_exception('no system role') }}{% endif %}{{ eos_token * 3 }}{% set ns = namespace(s='a') %}{% for i in range(5) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}")
for name, spec in [('plain.txt', 'org/tiny'), ('main.txt', 'org/tiny@main'), ('dev.txt', 'org/tiny@dev'), ('commit.txt', 'org/tiny@abc123'), ('dots.txt', 'org/tiny@../../secret.txt')]:
    write('hub_id', name, spec)

# index_reader: a mode byte (0: the bytes are the file; 1: byte patches (u16 offset, byte) of
# the target's valid template index; 2: arbitrary SQL edits of it), then the payload.
def small_index():
    import sqlite3, tempfile
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, 'i.db')
        c = sqlite3.connect(p)
        c.execute('PRAGMA page_size = 512')
        c.executescript("""
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES('format', 'focus-lens-index'), ('format_version', '1'), ('complete', '1'), ('tokens', '3'), ('documents', '1'),
              ('identity', '{"model":"m","model_fingerprint":"f","adapter":"a","adapter_sha256":"s","n_layers":1,"groups":2,"settings":{"mode":"topk(k=1)","k":1,"segment_len":8}}');
            CREATE TABLE centroids(layer INTEGER NOT NULL, grp INTEGER NOT NULL, members INTEGER NOT NULL, held INTEGER NOT NULL, held_mass REAL NOT NULL,
              label TEXT NOT NULL, rule TEXT NOT NULL, evidence TEXT NOT NULL, histogram TEXT NOT NULL, by_category TEXT NOT NULL, lifted TEXT NOT NULL, PRIMARY KEY(layer, grp)) WITHOUT ROWID;
            INSERT INTO centroids VALUES(0, 0, 2, 2, 1.5, 'a', 'token', '[]', '[1]', '[2]', '[[1,2,1.0]]'), (0, 1, 1, 1, 0.5, 'b', 'mixed', '[]', '[1]', '[1]', '[]');
            CREATE TABLE vocab(token INTEGER PRIMARY KEY, text TEXT NOT NULL, count INTEGER NOT NULL);
            INSERT INTO vocab VALUES(1, ' of', 2), (2, 'the', 1);
            CREATE TABLE documents(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL, tokens INTEGER NOT NULL,
              text TEXT NOT NULL, ids BLOB NOT NULL, offsets BLOB NOT NULL, categories BLOB NOT NULL);
            CREATE TABLE examples(layer INTEGER NOT NULL, grp INTEGER NOT NULL, rank INTEGER NOT NULL, doc INTEGER NOT NULL, pos INTEGER NOT NULL,
              membership REAL NOT NULL, left TEXT NOT NULL, token TEXT NOT NULL, right TEXT NOT NULL, PRIMARY KEY(layer, grp, rank)) WITHOUT ROWID;
            CREATE TABLE token_groups(layer INTEGER NOT NULL, token INTEGER NOT NULL, grp INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY(layer, token, grp)) WITHOUT ROWID;
            INSERT INTO token_groups VALUES(0, 1, 0, 2), (0, 2, 1, 1);
            CREATE TABLE categories(category INTEGER PRIMARY KEY, name TEXT NOT NULL, count INTEGER NOT NULL);
            CREATE TABLE comembership(la INTEGER NOT NULL, ga INTEGER NOT NULL, lb INTEGER NOT NULL, gb INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY(la, ga, lb, gb)) WITHOUT ROWID;
            CREATE TABLE routing(doc INTEGER NOT NULL, layer INTEGER NOT NULL, groups BLOB NOT NULL, memberships BLOB NOT NULL, PRIMARY KEY(doc, layer));
        """)
        c.commit(); c.execute('VACUUM'); c.close()
        with open(p, 'rb') as fh: return fh.read()

write('index_reader', 'raw-small-index.bin', b'\x00' + small_index())
write('index_reader', 'template.bin', b'\x01')
write('index_reader', 'template-patched.bin', b'\x01' + bytes([0x10, 0x00, 0xff, 0x00, 0x02, 0x41, 0x64, 0x00, 0x00]))
write('index_reader', 'template-edits.bin', b'\x02' + bytes(range(64)))
write('index_reader', 'template-view.bin', b'\x02\x01\x03\x01\x01\x05\x00\x00')
