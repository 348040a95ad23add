/* SPDX-License-Identifier: MIT */
/*
 * names.h -- LAYOUT.md's "Names" rules: the text of a dict key and its
 * encoding as a file name (the reprs it uses: decode/repr.h).
 *
 * Every name that reaches the mounted tree goes through pt_name_encode(),
 * so that no key can produce '/', NUL, "." or "..", or an over-long name.
 */
#ifndef PTFS_CORE_NAMES_H
#define PTFS_CORE_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "decode/pickle.h"
#include "decode/repr.h"

/* Longest encoded name before rule 4 cuts it, and the kept head. */
#define PT_NAME_MAX 240
#define PT_NAME_HEAD 230

/*
 * Rule 1: the raw text of a dict key (str as it is, int in decimal, True,
 * False, None, floats as repr, bytes and tuples as repr, other types as
 * "<module.qualname>"), appended to @out.
 */
void pt_key_text(struct pt_buf *out, const struct pt_value *key);

/*
 * Rules 2-4: escape '/', '%', NUL as %2F %25 %00; "" -> "%", "." -> "%2E",
 * ".." -> "%2E%2E"; over PT_NAME_MAX bytes -> first PT_NAME_HEAD bytes (cut
 * back to a UTF-8 boundary) + "~" + CRC-32 of the whole encoded name (8 hex
 * digits).  Appends to @out.
 */
void pt_name_encode(struct pt_buf *out, const uint8_t *raw, size_t n);

/*
 * The key a name stands for, rules 2 and 3 undone: %2F %25 %00 back to
 * '/', '%', NUL; "%" alone to ""; "%2E" and "%2E%2E" to "." and "..".
 * Any other '%' is itself.  Appended to @out.  A name rule 4 shortened
 * or rule 5 renamed decodes to its own text, not to the key it came
 * from.
 */
void pt_name_decode(struct pt_buf *out, const char *name);

#endif /* PTFS_CORE_NAMES_H */
