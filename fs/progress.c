/* SPDX-License-Identifier: MIT */
/*
 * progress.c -- the progress bar on stderr (progress.h).
 */
#include "progress.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_NS 100000000ll   /* at most ten times a second */

static int mode = PTFS_PROGRESS_AUTO;

struct ptfs_progress {
	const char *what;
	uint64_t total, done;   /* atomics */
	int64_t t0, last;       /* CLOCK_MONOTONIC ns; last draw */
	pthread_mutex_t lock;   /* drawing and printing */
	bool shown;             /* a bar is on the terminal now */
	bool tty;
};

void ptfs_progress_mode(int m)
{
	mode = m;
}

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000ll + t.tv_nsec;
}

struct ptfs_progress *ptfs_progress_start(const char *what)
{
	struct ptfs_progress *p;
	bool tty = isatty(STDERR_FILENO) == 1;

	if (mode == PTFS_PROGRESS_OFF || (mode == PTFS_PROGRESS_AUTO && !tty))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;    /* no bar: the work goes on */
	p->what = what;
	p->tty = tty;
	p->t0 = now_ns();
	p->last = p->t0 - REDRAW_NS;    /* the first progress draws at once */
	pthread_mutex_init(&p->lock, NULL);
	return p;
}

/* "412.0 MiB" */
static void human(char *out, size_t cap, double v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static unsigned columns(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

/* Draw the bar (lock held). */
static void draw(struct ptfs_progress *p, int64_t t)
{
	uint64_t done = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
	uint64_t total = __atomic_load_n(&p->total, __ATOMIC_RELAXED);
	double secs = (double)(t - p->t0) / 1e9, rate = secs > 0 ? (double)done / secs : 0;
	char d[32], tot[32], r[32], left[32] = "", line[256];
	unsigned cols = columns();
	int n;

	if (total < done)
		total = done;
	human(d, sizeof(d), (double)done);
	human(tot, sizeof(tot), (double)total);
	human(r, sizeof(r), rate);
	if (rate > 0 && total > done) {
		double eta = (double)(total - done) / rate;

		if (eta < 360000)
			snprintf(left, sizeof(left), "  %d:%02d left", (int)eta / 60, (int)eta % 60);
	}
	n = snprintf(line, sizeof(line), "%s  %s / %s  %3d%%  %s/s%s", p->what, d, tot,
		     total ? (int)(100.0 * (double)done / (double)total) : 0, r, left);
	if (n < 0)
		return;
	if ((unsigned)n >= cols)
		n = (int)cols - 1;
	fprintf(stderr, "\r%.*s\033[K", n, line);
	fflush(stderr);
	p->shown = true;
	__atomic_store_n(&p->last, t, __ATOMIC_RELAXED);
}

static void maybe_draw(struct ptfs_progress *p)
{
	int64_t t = now_ns();

	if (t - __atomic_load_n(&p->last, __ATOMIC_RELAXED) < REDRAW_NS)
		return;
	if (pthread_mutex_trylock(&p->lock) != 0)
		return;         /* another thread is drawing */
	if (t - p->last >= REDRAW_NS)
		draw(p, t);
	pthread_mutex_unlock(&p->lock);
}

void ptfs_progress_total(struct ptfs_progress *p, uint64_t n)
{
	if (p)
		__atomic_add_fetch(&p->total, n, __ATOMIC_RELAXED);
}

void ptfs_progress_done(struct ptfs_progress *p, uint64_t n)
{
	if (!p)
		return;
	__atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
	maybe_draw(p);
}

void ptfs_progress_hook(void *ctx, enum pt_progress_kind kind, uint64_t n)
{
	if (kind == PT_PROGRESS_TOTAL)
		ptfs_progress_total(ctx, n);
	else
		ptfs_progress_done(ctx, n);
}

/* Take the bar off the terminal (lock held). */
static void clear(struct ptfs_progress *p)
{
	if (p->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->shown = false;
	}
}

void ptfs_progress_print(struct ptfs_progress *p, const char *buf, size_t n)
{
	if (!p) {
		if (n)
			fwrite(buf, 1, n, stdout);
		fflush(stdout);
		return;
	}
	pthread_mutex_lock(&p->lock);
	clear(p);
	if (n)
		fwrite(buf, 1, n, stdout);
	fflush(stdout);
	{
		int64_t t = now_ns();

		if (t - p->last >= REDRAW_NS)
			draw(p, t);     /* else the next progress draws it */
	}
	pthread_mutex_unlock(&p->lock);
}

void ptfs_progress_end(struct ptfs_progress *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	clear(p);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
