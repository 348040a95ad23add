/* SPDX-License-Identifier: MIT */
/*
 * engine.c -- one thread per process drives a libcurl multi handle: range
 * requests of every remote object share its connections (HTTP/1.1 kept
 * alive, also over TLS; at most RM_MAX_INFLIGHT prefetch requests at once,
 * each on a connection of its own; a request a reader waits for never
 * queues behind them).  A transient failure (timeout, reset, 5xx, 429) is sent
 * again after an exponential backoff with full jitter, resuming after the
 * bytes already stored, until the job's deadline; Retry-After is honoured.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/http.h"
#include "base/url.h"
#include "remote/remote_i.h"

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* fork: the thread parks, see rm_atfork_* */
	bool pause;
	bool parked;
	pthread_t thread;
	CURLM *m;
	int refs;
	bool stop;
	int active;              /* jobs in the multi handle */
	struct rm_job *queue;    /* waiting to start */
	struct rm_job *running;  /* in the multi handle */
	unsigned seed;
} E = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static pthread_once_t rm_once = PTHREAD_ONCE_INIT;
static CURLcode rm_global_rc;

static void *rm_loop(void *arg);

/*
 * fork() (fuse_daemonize after the checkpoint was opened) keeps only the
 * forking thread: the engine's thread parks outside libcurl before the
 * fork, and the child starts a new one over the same multi handle.
 */
static void rm_atfork_prepare(void)
{
	pthread_mutex_lock(&E.lock);
	if (E.refs == 0)
		return;
	E.pause = true;
	curl_multi_wakeup(E.m);
	while (!E.parked)
		pthread_cond_wait(&E.cond, &E.lock);
}

static void rm_atfork_parent(void)
{
	E.pause = false;
	pthread_cond_broadcast(&E.cond);
	pthread_mutex_unlock(&E.lock);
}

static void rm_atfork_child(void)
{
	bool run = E.refs > 0;

	E.pause = false;
	E.parked = false;
	pthread_cond_init(&E.cond, NULL);
	pthread_mutex_unlock(&E.lock);
	if (run && pthread_create(&E.thread, NULL, rm_loop, NULL) != 0)
		abort();    /* nothing could be read any more */
}

static void rm_global_init(void)
{
	rm_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	pthread_atfork(rm_atfork_prepare, rm_atfork_parent, rm_atfork_child);
}

void rm_log(const struct pt_remote *r, int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!r->o.log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	r->o.log(level, line);
}

bool rm_tracing(void)
{
	const char *t = getenv("PTFS_REMOTE_TRACE");

	return t && *t && strcmp(t, "0");
}

double rm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *rm_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/*
 * AWS SigV4 by libcurl (CURLOPT_AWS_SIGV4) with @a's keys (aws.c: the
 * environment's, else the profile's; anonymous without them), a session
 * token as x-amz-security-token.  For S3 the payload hash header is signed
 * too (a GET's body is empty).  Custom headers, the Range header among
 * them, are signed; libcurl takes X-Amz-Date from the headers when one is
 * given.
 */
void rm_sigv4(CURL *h, const struct rm_aws *a, const char *service,
	      struct curl_slist **hdrs)
{
	char buf[4200];

	if (!a || !a->id[0] || !a->secret[0])
		return;
	snprintf(buf, sizeof(buf), "aws:amz:%s:%s", a->region, service);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, buf);
	curl_easy_setopt(h, CURLOPT_USERNAME, a->id);
	curl_easy_setopt(h, CURLOPT_PASSWORD, a->secret);
	if (!strcmp(service, "s3"))
		*hdrs = curl_slist_append(*hdrs, "x-amz-content-sha256: "
			"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	if (a->token[0]) {
		snprintf(buf, sizeof(buf), "x-amz-security-token: %s", a->token);
		*hdrs = curl_slist_append(*hdrs, buf);
	}
}

/* The hub: HF_TOKEN as a Bearer token, to the hub's own origin only
 * (scheme, host and port as parsed: never to its CDN, nor to a look-alike
 * such as http://HUB@other-host/ or hub.example.com.cdn.net). */
static void rm_setup_hf(const struct pt_remote *r, const char *url,
			struct curl_slist **hdrs)
{
	const char *tok = rm_env("HF_TOKEN");
	char buf[4096];

	if (!tok)
		tok = rm_env("HUGGING_FACE_HUB_TOKEN");
	if (!tok || !pt_url_same_origin(url, r->u.hf_base))
		return;
	snprintf(buf, sizeof(buf), "Authorization: Bearer %s", tok);
	*hdrs = curl_slist_append(*hdrs, buf);
}

int rm_http_setup(CURL *h, const struct pt_remote *r, const char *url,
		  struct curl_slist **hdrs)
{
	const char *ca = r->o.cafile ? r->o.cafile : rm_env("CURL_CA_BUNDLE");
	/* a stalled transfer is given up (and sent again) after a quarter of
	 * the deadline, 2 to 15 s, so that retries fit in the deadline */
	long slow = (long)r->o.timeout_s / 4 < 2 ? 2 :
		    (long)r->o.timeout_s / 4 > 15 ? 15 : (long)r->o.timeout_s / 4;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	/* redirects are followed by the engine (rm_job_finished), which
	 * decides the credentials of every hop by its origin */
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	/* HTTP/1.1 over TLS too: parallel ranges on parallel connections, as
	 * over http:// and to S3, so that the read-ahead's 16 ranges are not
	 * one TCP flow (one congestion window; a lost segment stalls them
	 * all).  On loopback the two cost the same wall time, and without
	 * delay HTTP/2 multiplexing costs this thread a little more CPU per
	 * byte (docs/BENCHMARKS.md, "Remote checkpoints") */
	curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, slow);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, slow);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "ptfs/" PTFS_VERSION);
	/* fewer, larger reads from the socket (default 16 KiB) */
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, (long)RM_RECV);
	if (ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, ca);
	if (r->u.kind == RM_S3 && pt_url_same_origin(url, r->u.prefix))
		rm_sigv4(h, r->u.aws, "s3", hdrs);
	else if (r->u.kind == RM_HF)
		rm_setup_hf(r, url, hdrs);
	return 0;
}

static void rm_str(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);

	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static size_t rm_on_header(char *p, size_t size, size_t nitems, void *ud)
{
	struct rm_job *j = ud;
	size_t n = size * nitems;
	struct pt_http_line h;

	switch (pt_http_parse_line(p, n, &h)) {
	case PT_HTTP_STATUS:
		/* a new response: its own fields */
		j->etag[0] = '\0';
		j->mtime = 0;
		j->total = 0;
		j->range_first = 0;
		j->retry_after = 0;
		break;
	case PT_HTTP_ETAG:
		rm_str(j->etag, sizeof(j->etag), h.value);
		break;
	case PT_HTTP_LINKED_ETAG:
		rm_str(j->linked, sizeof(j->linked), h.value);
		break;
	case PT_HTTP_REPO_COMMIT:
		rm_str(j->commit, sizeof(j->commit), h.value);
		break;
	case PT_HTTP_CONTENT_RANGE:
		/* malformed: no total, which every check refuses */
		if (h.range_ok) {
			j->range_first = h.first <= h.last ? h.first : 0;
			j->total = h.total;
		}
		break;
	case PT_HTTP_LAST_MODIFIED:
		j->mtime = h.time;
		break;
	case PT_HTTP_RETRY_AFTER:
		j->retry_after = h.seconds;
		break;
	default:
		break;
	}
	return n;
}

/* A job's gathered body to its owner; false when the owner stops the
 * transfer (then it stays stopped). */
static bool rm_job_flush(struct rm_job *j)
{
	size_t n = j->run_len;

	j->run_len = 0;
	if (n && j->on_body(j, (const char *)j->run, n) != n)
		j->stopped = true;
	return !j->stopped;
}

static size_t rm_on_body(char *p, size_t size, size_t nmemb, void *ud)
{
	struct rm_job *j = ud;
	size_t n = size * nmemb;
	long code = 0;

	curl_easy_getinfo(j->h, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200 && code != 206) {
		/* an error page: its start kept (S3 says why in <Code>) */
		size_t room = sizeof(j->errbody) - j->errlen;

		memcpy(j->errbody + j->errlen, p, n < room ? n : room);
		j->errlen += n < room ? n : room;
		return n;
	}
	j->status = code;
	/* into a reader's buffer as it comes; else gathered (fewer, larger
	 * writes into the cache, fewer wake-ups of its readers) */
	if (j->dst)
		return j->on_body(j, p, n);
	if (j->stopped || (j->run_len + n > RM_RECV && !rm_job_flush(j)))
		return 0;
	if (n > RM_RECV || (!j->run && !(j->run = malloc(RM_RECV))))
		return j->on_body(j, p, n);
	memcpy(j->run + j->run_len, p, n);
	j->run_len += n;
	return n;
}

/* The validator's headers (remote.h): the open's If-None-Match, else the
 * pinned version on every range request. */
static void rm_job_conditions(struct rm_job *j)
{
	const struct pt_remote *r = j->r;
	char cond[200];
	struct tm tm;
	time_t t = (time_t)r->mtime;

	j->if_range = false;
	if (j->conditional && r->etag[0]) {
		snprintf(cond, sizeof(cond), "If-None-Match: %s", r->etag);
		j->hdrs = curl_slist_append(j->hdrs, cond);
		return;
	}
	if (j->probe)
		return;
	if (r->vkind == RM_V_ETAG) {
		snprintf(cond, sizeof(cond), "If-Match: %s", r->etag);
		j->hdrs = curl_slist_append(j->hdrs, cond);
		/* a server that ignores If-Match on a range request but
		 * honours If-Range answers a new version with 200 */
		snprintf(cond, sizeof(cond), "If-Range: %s", r->etag);
		j->hdrs = curl_slist_append(j->hdrs, cond);
		j->if_range = true;
	} else if (r->vkind == RM_V_MTIME && gmtime_r(&t, &tm)) {
		strftime(cond, sizeof(cond),
			 "If-Unmodified-Since: %a, %d %b %Y %H:%M:%S GMT", &tm);
		j->hdrs = curl_slist_append(j->hdrs, cond);
	}
}

static int rm_job_start(struct rm_job *j)
{
	char range[80];
	const char *url = j->redirect ? j->redirect :
			  j->via_origin && j->r->origin ? j->r->origin : j->r->url;

	j->h = curl_easy_init();
	if (!j->h)
		return -ENOMEM;
	if (url == j->r->url)
		j->url_gen = j->r->url_gen;
	if (!j->deadline)   /* the retry deadline runs from the first try */
		j->deadline = rm_now() + j->r->o.timeout_s;
	j->cerr[0] = '\0';
	j->status = 0;
	j->errlen = 0;
	j->got0 = j->got + j->mem_len;
	if (!j->redirect)   /* a redirect's X-Repo-Commit stays */
		j->linked[0] = j->commit[0] = '\0';
	curl_slist_free_all(j->hdrs);
	j->hdrs = NULL;
	/* a header rather than CURLOPT_RANGE: SigV4 then signs it */
	if (j->probe && j->tail)
		snprintf(range, sizeof(range), "Range: bytes=-%" PRIu64, j->len);
	else
		snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64,
			 j->off + j->got, j->off + j->len - 1);
	j->hdrs = curl_slist_append(j->hdrs, range);
	rm_http_setup(j->h, j->r, url, &j->hdrs);
	rm_job_conditions(j);
	if (j->hdrs)
		curl_easy_setopt(j->h, CURLOPT_HTTPHEADER, j->hdrs);
	/* the deadline holds for a transfer that stalls, too */
	curl_easy_setopt(j->h, CURLOPT_TIMEOUT_MS,
			 (long)((j->deadline - rm_now()) * 1000) > 1 ?
			 (long)((j->deadline - rm_now()) * 1000) : 1L);
	curl_easy_setopt(j->h, CURLOPT_ERRORBUFFER, j->cerr);
	curl_easy_setopt(j->h, CURLOPT_HEADERFUNCTION, rm_on_header);
	curl_easy_setopt(j->h, CURLOPT_HEADERDATA, j);
	curl_easy_setopt(j->h, CURLOPT_WRITEFUNCTION, rm_on_body);
	curl_easy_setopt(j->h, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(j->h, CURLOPT_PRIVATE, j);
	if (curl_multi_add_handle(E.m, j->h) != CURLM_OK)
		return -EIO;
	if (rm_tracing())
		rm_log(j->r, 7, "remote: %.3f start %s%s", rm_now(), range,
		       j->redirect ? " (redirected)" : "");
	return 0;
}

static void rm_job_release(struct rm_job *j)
{
	if (j->h) {
		curl_multi_remove_handle(E.m, j->h);
		curl_easy_cleanup(j->h);
		j->h = NULL;
	}
	curl_slist_free_all(j->hdrs);
	j->hdrs = NULL;
	free(j->run);
	j->run = NULL;
	j->run_len = 0;
	j->stopped = false;
}

static bool rm_transient_curl(CURLcode c)
{
	switch (c) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

/* Seconds to wait before attempt number @a (1, 2, ...): full jitter over
 * 0.1 s * 2^a, at most 5 s, at least what Retry-After asked. */
#define RM_LAST_TRY 1.0         /* s before the deadline: the last try */

static double rm_backoff(const struct rm_job *j, unsigned a)
{
	double cap = 0.1 * (double)(1u << (a < 6 ? a : 6));
	double d = cap * (double)rand_r(&E.seed) / (double)RAND_MAX;

	if (d > 5)
		d = 5;
	if (j->retry_after > d)
		d = j->retry_after < 30 ? j->retry_after : 30;
	return d;
}

/* A 3xx answer: follow its Location (true), or fail the job. */
static bool rm_job_redirect(struct rm_job *j, long code)
{
	char *loc = NULL;

	curl_easy_getinfo(j->h, CURLINFO_REDIRECT_URL, &loc);
	if (loc && j->hops < 10 && (!strncasecmp(loc, "http://", 7) ||
				    !strncasecmp(loc, "https://", 8))) {
		char *nl = strdup(loc);

		if (nl) {
			free(j->redirect);
			j->redirect = nl;
			j->hops++;
			j->not_before = 0;
			j->rc = 0;
			if (j->probe) {
				free(j->mem);
				j->mem = NULL;
				j->mem_len = 0;
			}
			return true;
		}
	}
	snprintf(j->msg, sizeof(j->msg), "HTTP %ld %s", code,
		 j->hops >= 10 ? "(more than 10 redirects)" :
		 "without an http(s) Location");
	j->rc = -EIO;
	return false;
}

/* Connection refused, host unknown: at open, the answer (no retry). */
static bool rm_unreachable(CURLcode c)
{
	return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST ||
	       c == CURLE_COULDNT_RESOLVE_PROXY;
}

/* A job sent through the origin got its bytes from where the origin
 * redirects now: that URL replaces the expired one for every request. */
static void rm_url_renewed(struct rm_job *j)
{
	struct pt_remote *r = j->r;
	char *nu;

	if (!j->redirect || !strcmp(j->redirect, r->url))
		return;
	nu = strdup(j->redirect);
	if (!nu)
		return;     /* the next expiry asks the origin again */
	free(r->url);
	r->url = nu;
	r->url_gen++;
	if (rm_tracing())
		rm_log(r, 7, "remote: %.3f the CDN's URL renewed", rm_now());
}

/*
 * A 403 or 410 from the CDN: its signed URL expired.  One job asks the
 * origin again (rm_url_renewed); the others wait for it and then use the
 * new URL, so that an expiry costs one resolve, not one per request.
 * True when the job is sent again.
 */
static bool rm_cdn_expired(struct rm_job *j)
{
	struct pt_remote *r = j->r;

	if (rm_now() >= j->deadline)
		return false;
	free(j->redirect);
	j->redirect = NULL;
	j->hops = 0;
	j->not_before = 0;
	j->rc = 0;
	if (j->url_gen != r->url_gen)
		return true;            /* renewed since it was sent */
	if (r->renewer) {
		j->not_before = rm_now() + 0.05;
		return true;            /* being renewed: wait for it */
	}
	r->renewer = j;
	j->via_origin = true;
	return true;
}

/* What a finished transfer means (rm_job_finished); true when it is sent
 * again. */
static bool rm_job_verdict(struct rm_job *j, CURLcode cc)
{
	long code = 0;
	char *eff = NULL;
	bool transient;

	curl_easy_getinfo(j->h, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(j->h, CURLINFO_EFFECTIVE_URL, &eff);
	j->status = code;
	if (eff && (!j->eff_url || strcmp(eff, j->eff_url))) {
		free(j->eff_url);
		j->eff_url = strdup(eff);
	}
	if (cc == CURLE_OK && code >= 300 && code < 400 && code != 304)
		return rm_job_redirect(j, code);
	if (cc == CURLE_OK && (code == 200 || code == 206 || code == 304)) {
		if (j->via_origin && j->r->renewer == j)
			rm_url_renewed(j);
		j->rc = 0;
		return false;
	}
	/* the CDN's signed URL expired: ask the origin again, which
	 * redirects to a fresh one (the version is still If-Match'ed) */
	if (cc == CURLE_OK && (code == 403 || code == 410) && !j->probe &&
	    j->r->origin && !j->via_origin && rm_cdn_expired(j))
		return true;
	if (cc == CURLE_OK) {
		transient = code == 408 || code == 429 || code >= 500;
		snprintf(j->msg, sizeof(j->msg), "HTTP %ld", code);
		j->rc = code == 404 || code == 410 ? -ENOENT :
			code == 401 || code == 403 ? -EACCES :
			code == 412 ? -ESTALE : code == 416 ? -ENXIO : -EIO;
	} else {
		transient = rm_transient_curl(cc) && j->rc != -ESTALE &&
			    j->rc != -ECANCELED && !(j->probe && rm_unreachable(cc));
		/* cut at the deadline: the previous answer says more */
		bool keep = cc == CURLE_OPERATION_TIMEDOUT && j->attempt &&
			    j->msg[0] && rm_now() + 0.05 >= j->deadline;

		if ((j->rc == 0 || transient) && !keep)
			snprintf(j->msg, sizeof(j->msg), "%s",
				 j->cerr[0] ? j->cerr : curl_easy_strerror(cc));
		if (j->rc == 0 || transient) {
			j->rc = cc == CURLE_SSL_CACERT ||
					cc == CURLE_PEER_FAILED_VERIFICATION ?
				-EACCES : -EIO;
		}
	}
	if (!transient)
		return false;
	if (j->got + j->mem_len > j->got0 && !j->probe)
		/* it made progress: the deadline counts from its last byte */
		j->deadline = rm_now() + j->r->o.timeout_s;
	j->attempt++;
	j->not_before = rm_now() + rm_backoff(j, j->attempt);
	/* a backoff past the deadline: one last try in what is left of it,
	 * unless the server asked to wait longer (Retry-After) */
	if (j->not_before >= j->deadline - RM_LAST_TRY && !j->retry_after &&
	    rm_now() < j->deadline - RM_LAST_TRY)
		j->not_before = j->deadline - RM_LAST_TRY;
	if (j->not_before >= j->deadline) {
		snprintf(j->msg + strlen(j->msg), sizeof(j->msg) - strlen(j->msg),
			 " (gave up after %u attempts in %.1f s, -o timeout=%u)",
			 j->attempt, rm_now() - (j->deadline - j->r->o.timeout_s),
			 j->r->o.timeout_s);
		j->rc = -ETIMEDOUT;
		return false;
	}
	if (j->probe) {
		free(j->mem);
		j->mem = NULL;
		j->mem_len = 0;
	}
	j->rc = 0;
	return true;
}

/* Decide what a finished transfer means; true when it is sent again. */
static bool rm_job_finished(struct rm_job *j, CURLcode cc)
{
	bool again = rm_job_verdict(j, cc);

	if (j->r->renewer == j && !again)
		j->r->renewer = NULL;   /* renewed, or failed: others may try */
	return again;
}

static void rm_unlink_running(struct rm_job *j)
{
	struct rm_job **pp;

	for (pp = &E.running; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	}
	j->next = NULL;
	E.active--;
}

/* Collect finished transfers: done, or back in the queue for a retry. */
/* Finish the transfers that are done; true when one goes again (a
 * redirect, a retry): the loop must not sleep before looking at it. */
static bool rm_reap(void)
{
	bool requeued = false;
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(E.m, &left))) {
		struct rm_job *j = NULL;
		bool again;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
		/* its last bytes first: a retry asks from after them */
		again = rm_job_finished(j, rm_job_flush(j) ? msg->data.result :
					   CURLE_WRITE_ERROR);
		if (rm_tracing())
			rm_log(j->r, 7, "remote: %.3f done %ld", rm_now(),
			       j->status);
		rm_job_release(j);
		pthread_mutex_lock(&E.lock);
		rm_unlink_running(j);
		if (again) {
			j->next = E.queue;
			E.queue = j;
		}
		pthread_mutex_unlock(&E.lock);
		if (!again)
			j->on_done(j);
		requeued |= again;
	}
	return requeued;
}

/* Under E.lock: start queued jobs that are due, urgent ones first; return
 * how long the loop may sleep (ms). */
static int rm_start_due(struct rm_job **failed)
{
	double now = rm_now();
	double next = now + 1.0;
	int pass;

	for (pass = 0; pass < 2; pass++) {
		struct rm_job **pp = &E.queue;

		while (*pp) {
			struct rm_job *j = *pp;

			if (j->not_before > now) {
				if (j->not_before < next)
					next = j->not_before;
				pp = &j->next;
				continue;
			}
			if (pass == 0 ? !j->urgent : E.active >= RM_MAX_INFLIGHT) {
				pp = &j->next;
				continue;
			}
			*pp = j->next;
			if (j->on_start) {      /* once: it may shrink the job */
				bool go = j->on_start(j);

				j->on_start = NULL;
				if (!go) {      /* nothing to ask: it ends */
					j->next = *failed;
					*failed = j;
					continue;
				}
			}
			j->rc = rm_job_start(j);
			if (j->rc) {
				if (j->r->renewer == j)
					j->r->renewer = NULL;
				snprintf(j->msg, sizeof(j->msg), "cannot start a request");
				rm_job_release(j);
				j->next = *failed;
				*failed = j;
				continue;
			}
			j->next = E.running;
			E.running = j;
			E.active++;
		}
	}
	return (int)((next - now) * 1000) + 1;
}

/* Under E.lock: take the cancelled running jobs out of the multi handle. */
static struct rm_job *rm_take_cancelled(void)
{
	struct rm_job *out = NULL;
	struct rm_job **pp = &E.running;

	while (*pp) {
		struct rm_job *j = *pp;

		if (!j->cancel) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		E.active--;
		j->next = out;
		out = j;
	}
	return out;
}

/* What this pass received, to the owners of the transfers still running
 * (readers wait for it).  Only this thread changes E.running.  A job its
 * owner stopped gets no more bytes (rm_on_body) and ends as a write
 * error: with its last bytes, in rm_reap(). */
static void rm_flush_running(void)
{
	struct rm_job *j;

	for (j = E.running; j; j = j->next)
		rm_job_flush(j);
}

static void *rm_loop(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&E.lock);
	while (!E.stop) {
		struct rm_job *failed = NULL;
		struct rm_job *gone;
		int wait_ms;
		int running = 0;
		bool requeued;

		if (E.pause) {
			E.parked = true;
			pthread_cond_broadcast(&E.cond);
			while (E.pause)
				pthread_cond_wait(&E.cond, &E.lock);
			E.parked = false;
			continue;
		}
		wait_ms = rm_start_due(&failed);
		gone = rm_take_cancelled();

		pthread_mutex_unlock(&E.lock);
		while (gone) {
			struct rm_job *j = gone;

			gone = j->next;
			rm_job_release(j);
			j->rc = -ECANCELED;
			j->on_done(j);
		}
		while (failed) {
			struct rm_job *j = failed;

			failed = j->next;
			j->on_done(j);
		}
		curl_multi_perform(E.m, &running);
		/* a job queued again (a redirect to follow now) was not in
		 * wait_ms: it would wait out the poll */
		requeued = rm_reap();
		rm_flush_running();
		if (!requeued)
			curl_multi_poll(E.m, NULL, 0,
					wait_ms > 1000 ? 1000 : wait_ms, NULL);
		pthread_mutex_lock(&E.lock);
	}
	pthread_mutex_unlock(&E.lock);
	return NULL;
}

int rm_engine_get(struct pt_error *err)
{
	int rc = 0;

	int lrc = rm_curl_load(err);

	if (lrc)
		return lrc;
	pthread_once(&rm_once, rm_global_init);
	if (rm_global_rc != CURLE_OK)
		return pt_fail(err, -EIO, "libcurl: %s",
			       curl_easy_strerror(rm_global_rc));
	pthread_mutex_lock(&E.lock);
	if (E.refs == 0) {
		E.m = curl_multi_init();
		E.stop = false;
		E.seed = (unsigned)time(NULL) ^ (unsigned)getpid();
		if (!E.m) {
			rc = pt_fail(err, -ENOMEM, "libcurl: no multi handle");
		} else {
			curl_multi_setopt(E.m, CURLMOPT_MAX_HOST_CONNECTIONS,
					  (long)RM_MAX_CONNECTIONS);
			/* keep idle connections for the next request: the
			 * default cache shrinks with the handles in use */
			curl_multi_setopt(E.m, CURLMOPT_MAXCONNECTS,
					  (long)RM_MAX_INFLIGHT * 2);
			if (pthread_create(&E.thread, NULL, rm_loop, NULL)) {
				curl_multi_cleanup(E.m);
				E.m = NULL;
				rc = pt_fail(err, -EAGAIN, "cannot start a thread");
			}
		}
	}
	if (!rc)
		E.refs++;
	pthread_mutex_unlock(&E.lock);
	return rc;
}

void rm_engine_put(void)
{
	bool last;

	pthread_mutex_lock(&E.lock);
	last = --E.refs == 0;
	if (last)
		E.stop = true;
	pthread_mutex_unlock(&E.lock);
	if (!last)
		return;
	curl_multi_wakeup(E.m);
	pthread_join(E.thread, NULL);
	curl_multi_cleanup(E.m);
	E.m = NULL;
}

void rm_engine_submit(struct rm_job *j)
{
	struct rm_job **pp;

	pthread_mutex_lock(&j->r->lock);
	j->r->jobs++;
	pthread_mutex_unlock(&j->r->lock);
	/* first come, first started; but before a queued range of the same
	 * object further on: the readers of a stream wait for the nearest
	 * one, and readers on several threads submit their read-aheads in
	 * any order (a range queued behind the ones after it, started
	 * last, would hold its reader up until they all arrived) */
	pthread_mutex_lock(&E.lock);
	for (pp = &E.queue; *pp; pp = &(*pp)->next)
		if ((*pp)->r == j->r && (*pp)->off > j->off)
			break;
	j->next = *pp;
	*pp = j;
	pthread_mutex_unlock(&E.lock);
	curl_multi_wakeup(E.m);
}

/* Drop @r's queued jobs; its running ones stop at their next bytes
 * (rm_job_body sees r->closing) or their low-speed timeout. */
void rm_engine_cancel(struct pt_remote *r)
{
	struct rm_job *drop = NULL;
	struct rm_job **pp;

	pthread_mutex_lock(&E.lock);
	for (pp = &E.queue; *pp;) {
		struct rm_job *j = *pp;

		if (j->r == r) {
			*pp = j->next;
			j->next = drop;
			drop = j;
		} else {
			pp = &j->next;
		}
	}
	for (pp = &E.running; *pp; pp = &(*pp)->next)
		if ((*pp)->r == r)
			(*pp)->cancel = true;
	pthread_mutex_unlock(&E.lock);
	while (drop) {
		struct rm_job *j = drop;

		drop = j->next;
		j->rc = -ECANCELED;
		j->on_done(j);
	}
	curl_multi_wakeup(E.m);
}
