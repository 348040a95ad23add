/* SPDX-License-Identifier: MIT */
/* fmt.c -- the formats, in the order they are probed (fmt.h). */
#include "fmt/fmt.h"

#include <stddef.h>

const struct pt_format *const pt_formats[] = {
	&pt_fmt_ts_json,        /* ZIP with model.json and no data.pkl */
	&pt_fmt_pt2,            /* ZIP with archive_format or the 2.1-2.5
				 * serialized_exported_program.json */
	&pt_fmt_zip,            /* any other ZIP */
	&pt_fmt_tar,
	&pt_fmt_legacy,
	&pt_fmt_safetensors,
	&pt_fmt_onnx,           /* a protobuf ModelProto: ir_version first */
	&pt_fmt_sharded,        /* directories: any without a .metadata */
	&pt_fmt_dcp,            /* before pickle: a DCP .metadata is one;
				 * directories: those with a .metadata */
	&pt_fmt_pickle,         /* last: claims any pickle */
	NULL,
};
