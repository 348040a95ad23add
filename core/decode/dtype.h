/* SPDX-License-Identifier: MIT */
/*
 * dtype.h -- tensor element types: torch names, storage classes, numpy.
 *
 * One table maps every storage class torch pickles (FloatStorage, ...,
 * UntypedStorage), every dtype global (torch.float32, torch.half, ...), the
 * TorchScript "<Name>Storage" spellings and numpy dtype strings ("<f4") to
 * one struct pt_dtype (docs/FORMATS.md, "Storage types and dtypes" and
 * "numpy arrays in pickles").
 */
#ifndef PTFS_CORE_DTYPE_H
#define PTFS_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

struct pt_dtype {
	const char *name;       /* torch name without "torch.": "float32" */
	const char *storage;    /* legacy storage class ("FloatStorage") or
				 * NULL when only UntypedStorage carries it */
	const char *ts;         /* TorchScript scalar type name ("Float") */
	const char *numpy;      /* numpy dtype.name ("float32") or NULL */
	unsigned size;          /* bytes per element (packed types: 1) */
	bool packed;            /* several values per byte (quint4x2, ...) */
};

/* The dtype of the storage class @cls ("FloatStorage", "HalfStorage",
 * "Float8_e4m3fnStorage", ...), or NULL.  "UntypedStorage" and
 * "ByteStorage"-like names all resolve; untyped gives uint8. */
const struct pt_dtype *pt_dtype_from_storage(const char *cls);

/* The dtype named by a "torch.<name>" global (canonical or alias:
 * "float", "half", "long", "cfloat", ...), or NULL. */
const struct pt_dtype *pt_dtype_from_torch(const char *name);

/* The dtype of a numpy type string ("f4", "<f8", "|b1", "float32", "e",
 * "V2" is NULL): *@swap_char gets the byte-order character ('<', '>', '|',
 * '=') or 0.  NULL when unknown. */
const struct pt_dtype *pt_dtype_from_numpy(const char *str, size_t len);

/* Untyped storage (bytes). */
const struct pt_dtype *pt_dtype_untyped(void);

#endif /* PTFS_CORE_DTYPE_H */
