/* SPDX-License-Identifier: MIT */
/* error.c -- struct pt_error helpers. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 0)))
static int pt_vfail(struct pt_error *err, int code, const char *fmt, va_list ap)
{
	if (err) {
		err->code = code;
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	}
	return code;
}

int pt_fail(struct pt_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && err->code != 0)
		return code;
	va_start(ap, fmt);
	pt_vfail(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int pt_fail_over(struct pt_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pt_vfail(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void pt_error_prefix(struct pt_error *err, const char *fmt, ...)
{
	char head[PT_ERROR_MSG_MAX];
	char old[PT_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* truncation is fine: a long message keeps its head */
	if (snprintf(err->msg, sizeof(err->msg), "%.200s: %.300s", head, old) < 0)
		err->msg[0] = '\0';
}

void pt_error_clear(struct pt_error *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}
