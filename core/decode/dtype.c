/* SPDX-License-Identifier: MIT */
/* dtype.c -- the dtype table; see dtype.h and docs/FORMATS.md, "Storage
 * types and dtypes". */
#include "decode/dtype.h"

#include <string.h>

static const struct pt_dtype dtypes[] = {
	{ "float32", "FloatStorage", "Float", "float32", 4, false },
	{ "float64", "DoubleStorage", "Double", "float64", 8, false },
	{ "float16", "HalfStorage", "Half", "float16", 2, false },
	{ "bfloat16", "BFloat16Storage", "BFloat16", NULL, 2, false },
	{ "int64", "LongStorage", "Long", "int64", 8, false },
	{ "int32", "IntStorage", "Int", "int32", 4, false },
	{ "int16", "ShortStorage", "Short", "int16", 2, false },
	{ "int8", "CharStorage", "Char", "int8", 1, false },
	{ "uint8", "ByteStorage", "Byte", "uint8", 1, false },
	{ "bool", "BoolStorage", "Bool", "bool", 1, false },
	{ "complex64", "ComplexFloatStorage", "ComplexFloat", "complex64", 8,
	  false },
	{ "complex128", "ComplexDoubleStorage", "ComplexDouble", "complex128",
	  16, false },
	{ "complex32", "ComplexHalfStorage", "ComplexHalf", NULL, 4, false },
	{ "quint8", "QUInt8Storage", "QUInt8", NULL, 1, false },
	{ "qint8", "QInt8Storage", "QInt8", NULL, 1, false },
	{ "qint32", "QInt32Storage", "QInt32", NULL, 4, false },
	{ "quint4x2", "QUInt4x2Storage", "QUInt4x2", NULL, 1, true },
	{ "quint2x4", "QUInt2x4Storage", "QUInt2x4", NULL, 1, true },
	{ "float8_e5m2", NULL, "Float8_e5m2", NULL, 1, false },
	{ "float8_e4m3fn", NULL, "Float8_e4m3fn", NULL, 1, false },
	{ "float8_e5m2fnuz", NULL, "Float8_e5m2fnuz", NULL, 1, false },
	{ "float8_e4m3fnuz", NULL, "Float8_e4m3fnuz", NULL, 1, false },
	{ "float8_e8m0fnu", NULL, "Float8_e8m0fnu", NULL, 1, false },
	{ "float4_e2m1fn_x2", NULL, "Float4_e2m1fn_x2", NULL, 1, true },
	{ "uint16", NULL, "UInt16", "uint16", 2, false },
	{ "uint32", NULL, "UInt32", "uint32", 4, false },
	{ "uint64", NULL, "UInt64", "uint64", 8, false },
	{ "bits8", NULL, "Bits8", NULL, 1, false },
	{ "bits16", NULL, "Bits16", NULL, 2, false },
	{ "bits1x8", NULL, "Bits1x8", NULL, 1, true },
	{ "bits2x4", NULL, "Bits2x4", NULL, 1, true },
	{ "bits4x2", NULL, "Bits4x2", NULL, 1, true },
};

#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
#define UINT8_INDEX 8

static const struct {
	const char *alias;
	const char *name;
} aliases[] = {
	{ "float", "float32" },   { "double", "float64" },
	{ "half", "float16" },    { "long", "int64" },
	{ "int", "int32" },       { "short", "int16" },
	{ "cfloat", "complex64" }, { "cdouble", "complex128" },
	{ "chalf", "complex32" },
};

const struct pt_dtype *pt_dtype_untyped(void)
{
	return &dtypes[UINT8_INDEX];
}

const struct pt_dtype *pt_dtype_from_storage(const char *cls)
{
	size_t i, n;

	if (strcmp(cls, "UntypedStorage") == 0 ||
	    strcmp(cls, "_UntypedStorage") == 0 ||
	    strcmp(cls, "TypedStorage") == 0)
		return pt_dtype_untyped();
	n = strlen(cls);
	for (i = 0; i < N_DTYPES; i++) {
		size_t k;

		if (dtypes[i].storage && strcmp(dtypes[i].storage, cls) == 0)
			return &dtypes[i];
		/* TorchScript: "<TSName>Storage" */
		k = strlen(dtypes[i].ts);
		if (n == k + 7 && memcmp(cls, dtypes[i].ts, k) == 0 &&
		    strcmp(cls + k, "Storage") == 0)
			return &dtypes[i];
	}
	return NULL;
}

const struct pt_dtype *pt_dtype_from_torch(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (strcmp(aliases[i].alias, name) == 0)
			name = aliases[i].name;
	for (i = 0; i < N_DTYPES; i++)
		if (strcmp(dtypes[i].name, name) == 0)
			return &dtypes[i];
	return NULL;
}

const struct pt_dtype *pt_dtype_from_numpy(const char *str, size_t len)
{
	static const struct {
		char kind;
		unsigned size;
		const char *name;
	} codes[] = {
		{ 'f', 2, "float16" }, { 'f', 4, "float32" },
		{ 'f', 8, "float64" }, { 'i', 1, "int8" },
		{ 'i', 2, "int16" },   { 'i', 4, "int32" },
		{ 'i', 8, "int64" },   { 'u', 1, "uint8" },
		{ 'u', 2, "uint16" },  { 'u', 4, "uint32" },
		{ 'u', 8, "uint64" },  { 'b', 1, "bool" },
		{ 'c', 8, "complex64" }, { 'c', 16, "complex128" },
	};
	unsigned size = 0;
	char kind;
	size_t i, j;

	if (len && strchr("<>|=", str[0])) {
		str++;
		len--;
	}
	if (len < 2)
		return NULL;
	kind = str[0];
	for (j = 1; j < len; j++) {
		if (str[j] < '0' || str[j] > '9' || size > 1000)
			return NULL;
		size = size * 10 + (unsigned)(str[j] - '0');
	}
	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (codes[i].kind == kind && codes[i].size == size)
			return pt_dtype_from_torch(codes[i].name);
	return NULL;
}
