/* SPDX-License-Identifier: MIT */
/*
 * wonly.c -- would torch.load(weights_only=True) of torch >= 2.6 accept
 * this file?  Every pickle torch.load would read is scanned opcode by
 * opcode, like torch's weights-only unpickler reads it
 * (torch/_weights_only_unpickler.py, read at pytorch commit 00f730b66e58),
 * and every global it would refuse and every opcode it does not implement
 * is listed, all in one run (torch stops at the first).
 *
 * The allowlist (_get_allowed_globals): collections.OrderedDict/Counter,
 * torch.nn.parameter.Parameter, torch.serialization._get_layout,
 * torch.Size, torch.Tensor, torch.device, _codecs.encode,
 * builtins.bytearray/set/complex, the torch dtypes, tensor and storage
 * classes, the quantization schemes, the torch._utils._rebuild_*
 * functions and torch._tensor._rebuild_from_type_v2.  Modules sys, os,
 * posix and nt are refused whatever the allowlist says.  Python 2 names
 * are mapped first (__builtin__ -> builtins, copy_reg -> copyreg).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_i.h"        /* the kept pickles and the format */
#include "export/export.h"

static bool in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return true;
	return false;
}

static bool allowed_global(const char *m, const char *n)
{
	static const char *const exact[] = {
		"collections.OrderedDict", "collections.Counter",
		"torch.nn.parameter.Parameter", "torch.serialization._get_layout",
		"torch.Size", "torch.Tensor", "torch.device", "_codecs.encode",
		"builtins.bytearray", "builtins.set", "builtins.complex",
		"torch.per_tensor_affine", "torch.per_tensor_symmetric",
		"torch.per_channel_affine", "torch.per_channel_symmetric",
		"torch.per_channel_affine_float_qparams",
		"torch._tensor._rebuild_from_type_v2",
		/* the two storage classes by the module that defines them:
		 * "torch.UntypedStorage" is not on the list */
		"torch.storage.TypedStorage", "torch.storage.UntypedStorage",
		NULL,
	};
	static const char *const rebuild[] = {
		"_rebuild_parameter", "_rebuild_parameter_with_state",
		"_rebuild_qtensor", "_rebuild_tensor", "_rebuild_tensor_v2",
		"_rebuild_tensor_v3", "_rebuild_sparse_tensor",
		"_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass",
		"_rebuild_device_tensor_from_numpy",
		"_rebuild_device_tensor_from_cpu_tensor", NULL,
	};
	static const char *const tensors[] = {
		"Float", "Double", "Half", "BFloat16", "Long", "Int", "Short",
		"Char", "Byte", "Bool", "ComplexFloat", "ComplexDouble", NULL,
	};
	char full[512], base[64];
	const struct pt_dtype *dt;
	size_t nl = strlen(n);

	snprintf(full, sizeof(full), "%s.%s", m, n);
	if (in_list(full, exact))
		return true;
	if (strcmp(m, "torch._utils") == 0)
		return in_list(n, rebuild);
	if (strcmp(m, "torch") != 0 && strcmp(m, "torch.cuda") != 0 &&
	    strcmp(m, "torch.sparse") != 0 && strcmp(m, "torch.cuda.sparse") != 0)
		return false;
	if (nl > 6 && strcmp(n + nl - 6, "Tensor") == 0 && nl - 6 < sizeof(base)) {
		memcpy(base, n, nl - 6);
		base[nl - 6] = '\0';
		return in_list(base, tensors);
	}
	if (nl > 7 && strcmp(n + nl - 7, "Storage") == 0 &&
	    strcmp(m, "torch.sparse") != 0 && strcmp(m, "torch.cuda.sparse") != 0)
		return pt_dtype_from_storage(n) != NULL &&
		       strcmp(n, "UntypedStorage") != 0 && strcmp(n, "TypedStorage") != 0;
	if (strcmp(m, "torch") != 0)
		return false;
	dt = pt_dtype_from_torch(n);
	if (dt && strcmp(dt->name, n) == 0)
		return true;
	/* torch.uint1 .. uint7, torch.int1 .. int7 */
	return ((strncmp(n, "uint", 4) == 0 && n[4] >= '1' && n[4] <= '7' && !n[5]) ||
		(strncmp(n, "int", 3) == 0 && n[3] >= '1' && n[3] <= '7' && !n[4]));
}

static const char *const opnames[256] = {
	['('] = "MARK", ['.'] = "STOP", ['0'] = "POP", ['1'] = "POP_MARK",
	['2'] = "DUP", ['F'] = "FLOAT", ['I'] = "INT", ['J'] = "BININT",
	['K'] = "BININT1", ['L'] = "LONG", ['M'] = "BININT2", ['N'] = "NONE",
	['P'] = "PERSID", ['Q'] = "BINPERSID", ['R'] = "REDUCE",
	['S'] = "STRING", ['T'] = "BINSTRING", ['U'] = "SHORT_BINSTRING",
	['V'] = "UNICODE", ['X'] = "BINUNICODE", ['a'] = "APPEND",
	['b'] = "BUILD", ['c'] = "GLOBAL", ['d'] = "DICT", ['}'] = "EMPTY_DICT",
	['e'] = "APPENDS", ['g'] = "GET", ['h'] = "BINGET", ['i'] = "INST",
	['j'] = "LONG_BINGET", ['l'] = "LIST", [']'] = "EMPTY_LIST",
	['o'] = "OBJ", ['p'] = "PUT", ['q'] = "BINPUT", ['r'] = "LONG_BINPUT",
	['s'] = "SETITEM", ['t'] = "TUPLE", [')'] = "EMPTY_TUPLE",
	['u'] = "SETITEMS", ['G'] = "BINFLOAT", [0x80] = "PROTO",
	[0x81] = "NEWOBJ", [0x82] = "EXT1", [0x83] = "EXT2", [0x84] = "EXT4",
	[0x85] = "TUPLE1", [0x86] = "TUPLE2", [0x87] = "TUPLE3",
	[0x88] = "NEWTRUE", [0x89] = "NEWFALSE", [0x8a] = "LONG1",
	[0x8b] = "LONG4", ['B'] = "BINBYTES", ['C'] = "SHORT_BINBYTES",
	[0x8c] = "SHORT_BINUNICODE", [0x8d] = "BINUNICODE8",
	[0x8e] = "BINBYTES8", [0x8f] = "EMPTY_SET", [0x90] = "ADDITEMS",
	[0x91] = "FROZENSET", [0x92] = "NEWOBJ_EX", [0x93] = "STACK_GLOBAL",
	[0x94] = "MEMOIZE", [0x95] = "FRAME", [0x96] = "BYTEARRAY8",
	[0x97] = "NEXT_BUFFER", [0x98] = "READONLY_BUFFER_VIEW",
};

/* The opcodes torch's weights-only Unpickler implements. */
static const char allowed_ops[] =
	"cRbaesu(t\x85\x86\x87N\x88\x89)]}\x8fJKMGXUQhjqr\x8a\x80.\x81";

struct scan {
	struct pt_buf *refused;         /* "global X\n" / "opcode Y\n" lines */
	const uint8_t **mstr;           /* memo: strings pushed, by index */
	size_t *mlen;
	size_t mcap;
	uint32_t memo_next;
	const uint8_t *s1, *s2;         /* the last two strings pushed */
	size_t l1, l2;
};

static void refuse(struct scan *sc, const char *what, const char *name)
{
	struct pt_buf line;

	pt_buf_init(&line);
	pt_buf_printf(&line, "%s %s\n", what, name);
	if (line.p && (!sc->refused->p || !strstr(sc->refused->p, line.p)))
		pt_buf_add(sc->refused, line.p, line.len);
	pt_buf_free(&line);
}

static void check_global(struct scan *sc, const uint8_t *m, size_t ml,
			 const uint8_t *n, size_t nlen)
{
	char mod[256], name[256];

	if (ml >= sizeof(mod) || nlen >= sizeof(name))
		return refuse(sc, "global", "(a name over 255 bytes)");
	memcpy(mod, m, ml);
	mod[ml] = '\0';
	memcpy(name, n, nlen);
	name[nlen] = '\0';
	if (strcmp(mod, "__builtin__") == 0 || strcmp(mod, "exceptions") == 0)
		snprintf(mod, sizeof(mod), "builtins");
	else if (strcmp(mod, "copy_reg") == 0)
		snprintf(mod, sizeof(mod), "copyreg");
	if (strcmp(mod, "sys") && strcmp(mod, "os") && strcmp(mod, "posix") &&
	    strcmp(mod, "nt") && allowed_global(mod, name))
		return;
	{
		char full[520];
		snprintf(full, sizeof(full), "%s.%s", mod, name);
		refuse(sc, "global", full);
	}
}

static void push_str(struct scan *sc, const uint8_t *p, size_t n)
{
	sc->s1 = sc->s2;
	sc->l1 = sc->l2;
	sc->s2 = p;
	sc->l2 = n;
}

static void memo_set(struct scan *sc, uint64_t idx)
{
	if (idx >= 1u << 24)
		return;
	if (idx >= sc->mcap) {
		size_t nc = (size_t)idx * 2 + 16;
		const uint8_t **q = realloc(sc->mstr, nc * sizeof(*q));
		size_t *ql = q ? realloc(sc->mlen, nc * sizeof(*ql)) : NULL;
		if (q)
			sc->mstr = q;
		if (!q || !ql)
			return;
		sc->mlen = ql;
		memset(sc->mstr + sc->mcap, 0, (nc - sc->mcap) * sizeof(*q));
		sc->mcap = nc;
	}
	sc->mstr[idx] = sc->s2;
	sc->mlen[idx] = sc->l2;
}

static uint64_t le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

/* Scan one pickle; opcodes the scanner cannot follow end it (the
 * decoder already accepted the pickle, so this is only defensive). */
static void scan_pickle(struct scan *sc, const uint8_t *p, size_t len)
{
	size_t i = 0;

	sc->s1 = sc->s2 = NULL;
	sc->memo_next = 0;
	while (i < len) {
		uint8_t op = p[i++];
		size_t arg = 0, n = 0;
		const uint8_t *nl;

		if (!opnames[op])
			return refuse(sc, "opcode", "(unknown)");
		if (!memchr(allowed_ops, op, sizeof(allowed_ops) - 1))
			refuse(sc, "opcode", opnames[op]);
		switch (op) {
		case 'c': case 'i':             /* two text lines */
			nl = memchr(p + i, '\n', len - i);
			if (!nl)
				return;
			n = (size_t)(nl - (p + i));
			{
				const uint8_t *m = p + i, *nm = nl + 1;
				const uint8_t *nl2 = memchr(nm, '\n', len - (size_t)(nm - p));
				if (!nl2)
					return;
				check_global(sc, m, n, nm, (size_t)(nl2 - nm));
				i = (size_t)(nl2 + 1 - p);
			}
			continue;
		case 'F': case 'I': case 'L': case 'S': case 'V': case 'P':
		case 'g': case 'p':
			nl = memchr(p + i, '\n', len - i);
			if (!nl)
				return;
			i = (size_t)(nl + 1 - p);
			continue;
		case '.':
			return;
		case 'K': case 'h': case 'q': case 0x80: case 0x82: arg = 1; break;
		case 'M': case 0x83: arg = 2; break;
		case 'J': case 'j': case 'r': case 0x84: arg = 4; break;
		case 'G': case 0x95: arg = 8; break;
		case 'U': case 'C': case 0x8a: case 0x8c:
			if (i + 1 > len)
				return;
			n = p[i];
			arg = 1;
			break;
		case 'T': case 'X': case 'B': case 0x8b:
			if (i + 4 > len)
				return;
			n = (size_t)le(p + i, 4);
			arg = 4;
			break;
		case 0x8d: case 0x8e: case 0x96:
			if (i + 8 > len)
				return;
			n = (size_t)le(p + i, 8);
			arg = 8;
			break;
		default:
			break;
		}
		if (arg > len - i || n > len - i - arg)
			return;
		if (op == 'X' || op == 0x8c || op == 0x8d || op == 'U' || op == 'T')
			push_str(sc, p + i + arg, n);
		else if (op == 'h' || op == 'j') {
			uint64_t k = le(p + i, (unsigned)arg);
			if (k < sc->mcap && sc->mstr[k])
				push_str(sc, sc->mstr[k], sc->mlen[k]);
		} else if (op == 'q' || op == 'r')
			memo_set(sc, le(p + i, (unsigned)arg));
		else if (op == 0x94)
			memo_set(sc, sc->memo_next++);
		else if (op == 0x93 && sc->s1 && sc->s2)
			check_global(sc, sc->s1, sc->l1, sc->s2, sc->l2);
		i += arg + n;
	}
}

int pt_weights_only(struct pt_ckpt *ck, struct pt_buf *out)
{
	struct scan sc;
	const char *fmt = ck->fmt ? ck->fmt->name : "";
	int i;

	if (ck->kind_name && strstr(ck->kind_name, "TorchScript")) {
		pt_buf_puts(out, "weights_only: no: a TorchScript archive (torch.load refuses weights_only=True for it; torch.jit.load runs its code)\n");
		return 0;
	}
	if (ck->fmt == &pt_fmt_tar) {
		/* serialization.py's _legacy_load raises before unpickling */
		pt_buf_puts(out, "weights_only: no: a tar archive of torch <= 0.1.9 (torch.load refuses weights_only=True for the legacy tar format)\n");
		return 0;
	}
	if (ck->fmt != &pt_fmt_zip && ck->fmt != &pt_fmt_legacy) {
		pt_buf_printf(out, "weights_only: not applicable: a %s is not read by torch.load\n",
			      ck->kind_name ? ck->kind_name : fmt);
		return 0;
	}
	memset(&sc, 0, sizeof(sc));
	sc.refused = out;
	pt_buf_puts(out, "weights_only: ");
	{
		size_t mark = out->len;
		struct pt_buf lines;

		pt_buf_init(&lines);
		sc.refused = &lines;
		for (i = 0; i < ck->n_pickles; i++) {
			const uint8_t *p;
			uint8_t *own;
			struct pt_error err;

			if (pt__pickle_input(ck, i, &p, &own, &err)) {
				pt_buf_printf(&lines, "%s: cannot read it again: %s\n",
					      ck->pickles[i].label, err.msg);
				continue;
			}
			scan_pickle(&sc, p, ck->pickles[i].len);
			free(own);
		}
		free(sc.mstr);
		free(sc.mlen);
		out->len = mark;
		if (!lines.len) {
			pt_buf_puts(out, "yes: torch >= 2.6 loads this file with weights_only=True\n");
			pt_buf_free(&lines);
			return 1;
		}
		pt_buf_puts(out, "no: torch >= 2.6 refuses it with weights_only=True; what stops it:\n");
		{
			const char *p = lines.p, *e;
			while ((e = strchr(p, '\n'))) {
				pt_buf_printf(out, "  %.*s\n", (int)(e - p), p);
				p = e + 1;
			}
		}
		pt_buf_free(&lines);
	}
	return 0;
}
