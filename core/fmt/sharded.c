/* SPDX-License-Identifier: MIT */
/*
 * sharded.c -- sharded checkpoints: a *.index.json (Hugging Face's
 * save_pretrained: pytorch_model.bin.index.json,
 * model.safetensors.index.json) and the shard files beside it.
 *
 * The index is {"metadata": {...}, "weight_map": {"tensor": "shard file",
 * ...}}.  Each shard is opened as a checkpoint of its own (safetensors or
 * torch.save), kept open until close, and the mount shows one flat dict of
 * every tensor in weight_map order, each served from its shard: the
 * storages keep a pointer to their shard's checkpoint (struct
 * pt_storage.home), which reads them with its own descriptor.  Shard names
 * must be plain file names in the index's directory.  The index itself is
 * /.ptfs/index.json.
 *
 * The shards open together (pt__ckpt_open_siblings): over a remote source
 * in parallel, so that a 100-shard index costs the round trips of one
 * shard's open, not of a hundred in series; each open reads its shard's
 * metadata only (a safetensors header, a ZIP's end records and data.pkl),
 * and tensor bytes are fetched when read.  Whatever the order in which
 * they finished, they are taken in index order: the first shard that
 * fails gives the error, and warnings and notes come in that order.
 *
 * sh_probe_dir() picks the file to open when a directory is given.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SH_MAX_INDEX (256u << 20)       /* bytes of an index file */
#define SH_MAX_SHARDS 4096              /* distinct shard files */
#define SH_PROBE_SCAN (64u << 10)       /* where "weight_map" must appear */

struct shard {
	const uint8_t *name;            /* as in the index (strings kept) */
	size_t name_len;
	struct pt_ckpt *ck;
	uint64_t n_tensors;             /* named by the index */
	UT_hash_handle hh;              /* by name, while opening */
};

struct sh_state {
	struct shard *shards;
	size_t n;
};

struct wm_ent {                         /* one weight_map item */
	const uint8_t *name;
	size_t name_len;
	size_t shard;
	UT_hash_handle hh;              /* duplicate names */
};

struct tkey {                           /* a shard's tensors by key */
	const uint8_t *p;
	size_t len;
	struct pt_tensor *t;
	UT_hash_handle hh;
};

static int sh_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err)
{
	static const char key[] = "\"weight_map\"";
	struct pt_error e;
	uint8_t *buf;
	size_t i = 0, scan;
	bool hit;

	(void)err;
	while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' ||
			 head[i] == '\r'))
		i++;
	if (i >= n || head[i] != '{')
		return false;
	if (memmem(head, n, key, sizeof(key) - 1))
		return true;
	if (ck->src->size <= n)
		return false;
	scan = ck->src->size < SH_PROBE_SCAN ? (size_t)ck->src->size : SH_PROBE_SCAN;
	buf = malloc(scan);
	if (!buf)
		return false;
	pt_error_clear(&e);
	hit = pt_source_read(ck->src, buf, scan, 0, &e) == 0 &&
	      memmem(buf, scan, key, sizeof(key) - 1) != NULL;
	free(buf);
	return hit;
}

static const char *printable(const uint8_t *s, size_t n, char *buf, size_t cap)
{
	return pt__js_printable(s, n, buf, cap);
}

/* "weight_map": {"tensor": "file", ...} */
static int parse_weight_map(struct pt_js *j, struct wm_ent **ents, size_t *n,
			    struct shard **shards, size_t *n_shards,
			    const struct pt_limits *lim)
{
	struct shard *byname = NULL, *sh;
	struct wm_ent *seen = NULL, *dup;
	size_t cap = 0, scap = 0, i;
	bool empty, more = true;
	char nb[100];
	int rc = 0;

	rc = pt__js_open(j, '{', &empty);
	while (!rc && !empty && more) {
		const uint8_t *k, *f;
		size_t kn, fn;
		struct wm_ent *e;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (pt__js_peek(j) != '"') {
			rc = pt_fail(j->err, -EBADMSG,
				     "index: weight_map value of '%s' is not a file name",
				     printable(k, kn, nb, sizeof(nb)));
			break;
		}
		rc = pt__js_str(j, &f, &fn);
		if (rc)
			break;
		if (*n >= lim->max_dir_entries) {
			rc = pt_fail(j->err, -EFBIG,
				     "index: more than %" PRIu64 " tensors",
				     lim->max_dir_entries);
			break;
		}
		HASH_FIND(hh, byname, f, fn, sh);
		if (!sh) {
			if (*n_shards >= SH_MAX_SHARDS) {
				rc = pt_fail(j->err, -EFBIG,
					     "index: more than %u shard files",
					     SH_MAX_SHARDS);
				break;
			}
			if (scap <= *n_shards) {
				/* the hash lives in the array (its table is
				 * reached through the first item): drop it
				 * before growing, rebuild it after */
				struct shard *q;

				HASH_CLEAR(hh, byname);
				scap = scap ? scap * 2 : 16;
				q = realloc(*shards, scap * sizeof(*q));
				if (!q) {
					rc = pt_fail(j->err, -ENOMEM, "out of memory");
					break;
				}
				*shards = q;
				for (i = 0; i < *n_shards; i++)
					HASH_ADD_KEYPTR(hh, byname, q[i].name,
							q[i].name_len, &q[i]);
			}
			sh = &(*shards)[(*n_shards)++];
			memset(sh, 0, sizeof(*sh));
			sh->name = f;
			sh->name_len = fn;
			HASH_ADD_KEYPTR(hh, byname, sh->name, sh->name_len, sh);
		}
		if (cap <= *n) {
			struct wm_ent *q;

			cap = cap ? cap * 2 : 64;
			q = realloc(*ents, cap * sizeof(*q));
			if (!q) {
				rc = pt_fail(j->err, -ENOMEM, "out of memory");
				break;
			}
			*ents = q;
		}
		e = &(*ents)[(*n)++];
		memset(e, 0, sizeof(*e));
		e->name = k;
		e->name_len = kn;
		e->shard = (size_t)(sh - *shards);
		sh->n_tensors++;
		rc = pt__js_next(j, '}', &more);
	}
	HASH_CLEAR(hh, byname);
	if (rc)
		return rc;
	/* duplicate tensor names (the array is final now) */
	for (i = 0; i < *n && !rc; i++) {
		struct wm_ent *e = &(*ents)[i];

		HASH_FIND(hh, seen, e->name, e->name_len, dup);
		if (dup)
			rc = pt_fail(j->err, -EBADMSG,
				     "index: tensor '%s' appears twice in weight_map",
				     printable(e->name, e->name_len, nb, sizeof(nb)));
		else
			HASH_ADD_KEYPTR(hh, seen, e->name, e->name_len, e);
	}
	HASH_CLEAR(hh, seen);
	return rc;
}

static int parse_index(struct pt_js *j, struct wm_ent **ents, size_t *n,
		       struct shard **shards, size_t *n_shards,
		       const struct pt_limits *lim)
{
	bool empty, more = true, found = false;
	int rc;

	rc = pt__js_open(j, '{', &empty);
	while (!rc && !empty && more) {
		const uint8_t *k;
		size_t kn;

		rc = pt__js_key(j, &k, &kn);
		if (rc)
			break;
		if (kn == 10 && memcmp(k, "weight_map", 10) == 0) {
			if (found)
				return pt_fail(j->err, -EBADMSG,
					       "index: weight_map appears twice");
			found = true;
			rc = parse_weight_map(j, ents, n, shards, n_shards, lim);
		} else {
			rc = pt__js_skip(j);    /* "metadata" and the like */
		}
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	if (!rc)
		rc = pt__js_end(j);
	if (!rc && !found)
		rc = pt_fail(j->err, -EBADMSG, "index: no weight_map");
	return rc;
}

/* A plain file name: no '/', NUL, "." or "..", not empty. */
static bool plain_name(const uint8_t *s, size_t n)
{
	return n > 0 && n < 1024 && !memchr(s, '/', n) && !memchr(s, '\0', n) &&
	       !(n == 1 && s[0] == '.') &&
	       !(n == 2 && s[0] == '.' && s[1] == '.');
}

static void tkeys_free(struct tkey **map)
{
	struct tkey *k, *tmp;

	HASH_ITER(hh, *map, k, tmp) {
		HASH_DEL(*map, k);
		free(k);
	}
}

static int tkey_add(struct tkey **map, const struct pt_value *key,
		    struct pt_value *val)
{
	struct tkey *k;

	if (!key || key->kind != PT_V_STR || !val ||
	    pt__vclass(val) != PT_C_TENSOR)
		return 0;
	HASH_FIND(hh, *map, key->u.s.p, key->u.s.len, k);
	if (k) {                /* SETITEMS again: the later value wins */
		k->t = val->aux;
		return 0;
	}
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->p = key->u.s.p;
	k->len = key->u.s.len;
	k->t = val->aux;
	HASH_ADD_KEYPTR(hh, *map, k->p, k->len, k);
	return 0;
}

static int tkey_pairs(struct tkey **map, const struct pt_vseq *kv)
{
	size_t i;
	int rc = 0;

	for (i = 0; i + 1 < kv->n && !rc; i += 2)
		rc = tkey_add(map, kv->v[i], kv->v[i + 1]);
	return rc;
}

/* The str -> tensor items of a shard's top-level dict (a dict, or an
 * OrderedDict built by REDUCE + SETITEMS). */
static int shard_tensors(const struct pt_ckpt *sub, struct tkey **map)
{
	const struct pt_value *r = sub->root, *a0;
	int rc;

	if (!r || pt__vclass(r) != PT_C_MAP)
		return -EBADMSG;
	if (r->kind == PT_V_DICT)
		return tkey_pairs(map, &r->u.dict.kv);
	if (r->kind != PT_V_CALL && r->kind != PT_V_OBJ)
		return -EBADMSG;
	a0 = r->u.call.args && r->u.call.args->u.seq.n ?
		     r->u.call.args->u.seq.v[0] : NULL;
	if (a0 && a0->kind == PT_V_DICT) {
		rc = tkey_pairs(map, &a0->u.dict.kv);
		if (rc)
			return rc;
	}
	return tkey_pairs(map, pt_call_kv(r));
}

/*
 * Open the shards, files beside the index: the ones before the first name
 * that is not a plain file name, together (pt__ckpt_open_siblings: in
 * parallel over a remote source) into *@out, one struct pt_child_open a
 * shard (name NULL from the first name not plain on).  Only -ENOMEM fails
 * here; what each open gave is taken in order by take_shard().
 */
static int open_shards(struct pt_ckpt *ck, const struct sh_state *s,
		       struct pt_child_open **out, struct pt_error *err)
{
	struct pt_child_open *v = calloc(s->n + 1, sizeof(*v));
	size_t n;

	*out = v;
	if (!v)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (n = 0; n < s->n; n++) {
		const struct shard *sh = &s->shards[n];

		if (!plain_name(sh->name, sh->name_len))
			break;
		v[n].name = strndup((const char *)sh->name, sh->name_len);
		if (!v[n].name)
			return pt_fail(err, -ENOMEM, "out of memory");
	}
	pt__ckpt_open_siblings(ck, v, n, true, true);
	return 0;
}

static void free_opens(struct pt_child_open *v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++) {
		pt__ckpt_free(v[i].ck);         /* NULL once taken */
		free(v[i].name);
	}
	free(v);
}

/* The outcome of opening shard @sh (@c, open_shards()) into sh->ck. */
static int take_shard(struct shard *sh, struct pt_child_open *c,
		      struct pt_error *err)
{
	char nb[100];

	printable(sh->name, sh->name_len, nb, sizeof(nb));
	if (!c->name)
		return pt_fail(err, -EBADMSG,
			       "index: shard '%s' is not a plain file name in the index's directory",
			       nb);
	if (c->rc) {
		pt_fail(err, c->rc, "%s", c->err.msg);
		pt_error_prefix(err, "shard '%s'", nb);
		return c->rc;
	}
	sh->ck = c->ck;
	c->ck = NULL;
	return 0;
}

/* Warnings of the shards, and the info lines. */
static void sh_report(struct pt_ckpt *ck, const struct sh_state *s,
		      size_t n_tensors)
{
	char nb[100];
	size_t i;

	pt_buf_printf(&ck->notes, "index: %zu tensors in %zu shards\n",
		      n_tensors, s->n);
	for (i = 0; i < s->n; i++) {
		const struct shard *sh = &s->shards[i];
		const char *w = pt_ckpt_warnings(sh->ck);

		printable(sh->name, sh->name_len, nb, sizeof(nb));
		if (i < 64)
			pt_buf_printf(&ck->notes, "shard %s: %s, %" PRIu64 " bytes, %" PRIu64 " tensors used\n",
				      nb, pt_ckpt_format(sh->ck),
				      sh->ck->src->size, sh->n_tensors);
		while (*w) {
			const char *e = strchr(w, '\n');
			int len = (int)(e ? (size_t)(e - w) : strlen(w));

			pt__warn(ck, "shard %s: %.*s", nb, len, w);
			w += len + (e ? 1 : 0);
		}
	}
	if (s->n > 64)
		pt_buf_printf(&ck->notes, "(%zu more shards)\n", s->n - 64);
}

static void sh_close(struct pt_ckpt *ck)
{
	struct sh_state *s = ck->fmt_state;
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->n; i++)
		pt__ckpt_free(s->shards[i].ck);
	free(s->shards);
	free(s);
	ck->fmt_state = NULL;
}

static int sh_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct sh_state *s = NULL;
	struct wm_ent *ents = NULL;
	struct tkey **maps = NULL;
	struct pt_child_open *opens = NULL;
	struct pt_value *root;
	struct pt_js j;
	uint8_t *text = NULL;
	char nb[100], sb[100];
	size_t n = 0, i;
	int rc;

	memset(&j, 0, sizeof(j));
	/* a shard is opened as a child (depth 1): an index naming itself, or
	 * another index, as a shard would otherwise nest without end */
	if (ck->depth > 0)
		return pt_fail(err, -EBADMSG,
			       "is itself a sharded index (an index may only name weights files)");
	if (!pt_source_has_siblings(ck->src))
		return pt_fail(err, -ENOTSUP,
			       "sharded index in memory: its shards are files beside it, open it from its directory");
	if (ck->src->size > SH_MAX_INDEX)
		return pt_fail(err, -EFBIG,
			       "index of %" PRIu64 " bytes exceeds the limit of %u",
			       ck->src->size, SH_MAX_INDEX);
	s = calloc(1, sizeof(*s));
	if (!s)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = s;      /* sh_close() frees it, also on failure */
	rc = pt_source_dup(ck->src, 0, (size_t)ck->src->size, &text, err);
	if (rc)
		return rc;
	rc = pt__add_meta_file(ck, "index.json", text, (size_t)ck->src->size);
	if (rc)
		return pt_fail(err, rc, "out of memory");
	rc = pt__js_init(&j, text, (size_t)ck->src->size, "index", err);
	if (!rc)
		rc = parse_index(&j, &ents, &n, &s->shards, &s->n,
				 &ck->opts.limits);
	if (!rc)
		rc = pt__js_keep(&j, ck);
	if (rc)
		goto out;
	maps = calloc(s->n + 1, sizeof(*maps));
	if (!maps) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	rc = open_shards(ck, s, &opens, err);
	if (rc)
		goto out;
	for (i = 0; i < s->n; i++) {
		struct shard *sh = &s->shards[i];

		rc = take_shard(sh, &opens[i], err);
		if (rc)
			goto out;
		rc = shard_tensors(sh->ck, &maps[i]);
		if (rc) {
			rc = rc == -ENOMEM ? pt_fail(err, rc, "out of memory") :
				pt_fail(err, rc, "shard '%s' is not a dict of tensors",
					printable(sh->name, sh->name_len, nb, sizeof(nb)));
			goto out;
		}
	}
	root = pt__value_dict(ck, n);
	if (!root) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		const struct wm_ent *e = &ents[i];
		struct shard *sh = &s->shards[e->shard];
		struct tkey *k;

		HASH_FIND(hh, maps[e->shard], e->name, e->name_len, k);
		if (!k) {
			rc = pt_fail(err, -EBADMSG,
				     "index: tensor '%s' is not in shard '%s'",
				     printable(e->name, e->name_len, nb, sizeof(nb)),
				     printable(sh->name, sh->name_len, sb, sizeof(sb)));
			goto out;
		}
		/* served from the shard's file (tensor_read.c storage_read) */
		k->t->st->home = sh->ck;
		pt__value_dict_set_tensor(root, i, e->name, e->name_len, k->t);
		ck->n_tensors++;
		ck->tensor_bytes += k->t->nbytes;
	}
	ck->root = root;
	sh_report(ck, s, n);
out:
	if (maps)
		for (i = 0; i < s->n; i++)
			tkeys_free(&maps[i]);
	free(maps);
	free_opens(opens, s->n);
	free(ents);
	pt__js_free(&j);
	return rc;
}

/* ---- a directory given as the checkpoint ---- */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n > k && strcmp(s + n - k, suffix) == 0;
}

static bool is_weights_name(const char *s)
{
	return ends_with(s, ".safetensors") || ends_with(s, ".bin") ||
	       ends_with(s, ".pt") || ends_with(s, ".pth");
}

/* Keep the smaller of *@best and @name. */
static void keep_min(const char **best, const char *name)
{
	if (!*best || strcmp(name, *best) < 0)
		*best = name;
}

/*
 * struct pt_format.probe_dir: the file to open for the directory listed in
 * @e[0 .. @n): its *.index.json (one naming safetensors shards first, then
 * the smallest name), or else its only weights file (*.safetensors, *.bin,
 * *.pt, *.pth).  A directory with a .metadata file is left to DCP
 * (fmt/dcp.c); any other is claimed, with a message saying why it is not
 * a checkpoint when there is nothing to open in it.
 */
static int sh_probe_dir(const struct pt_dir_entry *e, size_t n, char **out,
			struct pt_error *err)
{
	const char *st_index = NULL, *index = NULL, *weights = NULL, *pick;
	size_t n_weights = 0, i;
	bool dcp = false;

	*out = NULL;
	for (i = 0; i < n; i++) {
		const char *name = e[i].name;

		if (strcmp(name, ".metadata") == 0) {
			if (e[i].regular)
				return 0;
			dcp = true;
		}
		if (!e[i].regular)
			continue;
		if (ends_with(name, ".safetensors.index.json"))
			keep_min(&st_index, name);
		else if (ends_with(name, ".index.json"))
			keep_min(&index, name);
		else if (is_weights_name(name) && ++n_weights == 1)
			weights = name;
	}
	pick = st_index ? st_index : index ? index :
	       n_weights == 1 ? weights : NULL;
	if (pick) {
		*out = strdup(pick);
		return *out ? 1 : pt_fail(err, -ENOMEM, "out of memory");
	}
	if (dcp)
		return pt_fail(err, -ENOTSUP,
			       "is a distributed checkpoint (DCP) directory whose .metadata is not a file");
	if (n_weights > 1)
		return pt_fail(err, -EISDIR,
			       "is a directory of %zu weights files without a *.index.json: give one file",
			       n_weights);
	return pt_fail(err, -EISDIR,
		       "is a directory without a *.index.json or weights file, not a checkpoint");
}

/* struct pt_format.restructure: fmt/sharded_edit.c, given the shards. */
static int sh_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
			  struct pt_error *err)
{
	const struct sh_state *s = ck->fmt_state;
	struct pt_shard_ref *refs = calloc(s->n + 1, sizeof(*refs));
	size_t i;
	int rc;

	if (!refs)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < s->n; i++) {
		refs[i].ck = s->shards[i].ck;
		refs[i].name = s->shards[i].name;
		refs[i].name_len = s->shards[i].name_len;
	}
	rc = pt__sh_restructure(ck, refs, s->n, dry, size, err);
	free(refs);
	return rc;
}

const struct pt_format pt_fmt_sharded = {
	.name = "sharded checkpoint index",
	.probe = sh_probe,
	.probe_dir = sh_probe_dir,
	.open = sh_open,
	.storage = NULL,
	.close = sh_close,
	.restructure = sh_restructure,
	.flat = true,
};
