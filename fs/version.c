/* SPDX-License-Identifier: MIT */
/*
 * version.c -- `ptfs --version`: the version, the containers and sources
 * this build reads, and the libraries it runs with (the versions loaded at run time
 * where the library can say so), so a bug report says what was built.
 * Libraries loaded on demand (base/dl.h, core/remote/curl_dl.c) are not
 * loaded for this: their line gives the version built against.
 */
#include "ptfs.h"

#include <stdio.h>

#include <fuse_lowlevel.h>
#include <libdeflate.h>
#include <openssl/opensslv.h>
#ifdef PTFS_HAVE_LIBARCHIVE
#include <archive.h>
#endif
#ifdef PTFS_HAVE_REMOTE
#include <curl/curlver.h>
#endif


void ptfs_version(FILE *f)
{
	fprintf(f, "ptfs %s\n", PTFS_VERSION);
	fputs("formats: torch.save zip, legacy torch.save, plain pickle, TorchScript,\n"
	      "         torch.export .pt2, safetensors, sharded, DCP", f);
#ifdef PTFS_HAVE_LIBARCHIVE
	fputs(", tar (torch <= 0.1.9)\n", f);
#else
	fputs("\nnot built: tar (torch <= 0.1.9): no libarchive at build time\n", f);
#endif
#ifdef PTFS_HAVE_REMOTE
	fputs("sources: local files, http://, https://, s3://, hf://\n", f);
#else
	fputs("sources: local files\n"
	      "not built: remote sources (http, https, s3, hf): no libcurl at build time\n", f);
#endif
	fprintf(f, "libraries: libfuse %s, libdeflate %s", fuse_pkgversion(),
		LIBDEFLATE_VERSION_STRING);
#ifdef PTFS_HAVE_LIBARCHIVE
	fprintf(f, ",\n           libarchive %s (loaded on the first tar checkpoint)",
		ARCHIVE_VERSION_ONLY_STRING);
#endif
	fprintf(f, ",\n           libcrypto %s (loaded on the first sha256)",
		OPENSSL_FULL_VERSION_STR);
#ifdef PTFS_HAVE_REMOTE
	/* libcurl is loaded on the first URL (core/remote/curl_dl.c), not
	 * for --version: the version it was built against */
	fprintf(f, ",\n           libcurl %s (loaded on the first URL)", LIBCURL_VERSION);
#endif
	fputc('\n', f);
#ifdef PTFS_SANITIZED
	fputs("build: AddressSanitizer + UndefinedBehaviorSanitizer\n", f);
#endif
#ifdef PTFS_FAULT_INJECTION
	fputs("build: test build, fault injection (PTFS_FAULT)\n", f);
#endif
}
