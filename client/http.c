// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The client's transport: one HTTP/1.1 request per connection over the daemon's Unix
 * socket, with a deadline on the whole exchange. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "llmprofctl.h"

/* The largest answer accepted: a list of thousands of processes is a few MiB. */
#define CTL_MAX_RESPONSE (256u << 20)

double ctl_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits until fd is ready for events or the deadline passes: 0 or -ETIMEDOUT/-errno. */
static int wait_fd(int fd, short events, double deadline)
{
	for (;;) {
		double left = deadline - ctl_now_s();
		struct pollfd p = {.fd = fd, .events = events};
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)(left * 1000) + 1);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int connect_unix(const char *path, double deadline)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A full accept backlog answers EAGAIN at once on a non-blocking Unix socket: the
	 * daemon pauses accepting when overloaded, so keep trying until the deadline. */
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		if (err == EINTR)
			continue;
		if (err != EAGAIN || ctl_now_s() > deadline) {
			close(fd);
			return err == EAGAIN ? -ETIMEDOUT : -err;
		}
		usleep(10000);
	}
	return fd;
}

static int send_all(int fd, const char *p, size_t len, double deadline)
{
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		int r;

		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (w < 0) {
			r = wait_fd(fd, POLLOUT, deadline);
			if (r < 0)
				return r;
			continue;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Reads until the daemon closes the connection (every request says Connection: close). */
static int recv_all(int fd, char **out, size_t *outlen, double deadline)
{
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap), *nb;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t r;
		int w;

		if (cap - len < 4096) {
			if (cap >= CTL_MAX_RESPONSE) {
				free(buf);
				return -EFBIG;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		r = recv(fd, buf + len, cap - len - 1, 0);
		if (r > 0) {
			len += (size_t)r;
			continue;
		}
		if (r == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			w = -errno;
			free(buf);
			return w;
		}
		w = wait_fd(fd, POLLIN, deadline);
		if (w < 0) {
			free(buf);
			return w;
		}
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/* Splits "HTTP/1.1 200 OK\r\nheaders\r\n\r\nbody" into status and body. */
static int parse_response(char *buf, size_t len, struct ctl_response *res)
{
	char *end = strstr(buf, "\r\n\r\n"), *line, *body;
	long long clen = -1;
	int status;

	if (!end || sscanf(buf, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100 || status > 599)
		return -EPROTO;
	body = end + 4;
	*end = '\0';
	for (line = strstr(buf, "\r\n"); line; line = strstr(line, "\r\n")) {
		line += 2;
		if (!strncasecmp(line, "Content-Length:", 15)) {
			char *e;

			errno = 0;
			clen = strtoll(line + 15, &e, 10);
			if (errno || clen < 0)
				return -EPROTO;
		}
	}
	if (clen >= 0 && (size_t)clen > len - (size_t)(body - buf))
		return -EPROTO; /* cut short */
	res->status = status;
	res->len = clen >= 0 ? (size_t)clen : len - (size_t)(body - buf);
	res->body = malloc(res->len + 1);
	if (!res->body)
		return -ENOMEM;
	memcpy(res->body, body, res->len);
	res->body[res->len] = '\0';
	return 0;
}

/* Connects and sends the request: the socket, or -errno. */
static int send_request(const char *socket_path, double deadline, const char *method,
			const char *path, const char *body)
{
	size_t blen = body ? strlen(body) : 0;
	char *req = NULL;
	int fd, r, n;

	fd = connect_unix(socket_path, deadline);
	if (fd < 0)
		return fd;
	if (body)
		n = asprintf(&req,
			     "%s %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: llmprofctl/%s\r\n"
			     "Connection: close\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\n\r\n%s",
			     method, path, LLMPROF_VERSION, blen, body);
	else
		n = asprintf(&req,
			     "%s %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: llmprofctl/%s\r\n"
			     "Connection: close\r\n\r\n",
			     method, path, LLMPROF_VERSION);
	if (n < 0) {
		close(fd);
		return -ENOMEM;
	}
	r = send_all(fd, req, (size_t)n, deadline);
	free(req);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int ctl_http(const char *socket_path, double timeout, const char *method, const char *path,
	     const char *body, struct ctl_response *res)
{
	double deadline = ctl_now_s() + timeout;
	size_t rlen = 0;
	char *buf = NULL;
	int fd, r;

	memset(res, 0, sizeof(*res));
	fd = send_request(socket_path, deadline, method, path, body);
	if (fd < 0)
		return fd;
	r = recv_all(fd, &buf, &rlen, deadline);
	close(fd);
	if (r < 0)
		return r;
	r = parse_response(buf, rlen, res);
	free(buf);
	return r;
}

/* A chunked body's decoding (RFC 9112 7.1): sizes in hex, each chunk's data and CRLF, a
 * last chunk of size 0, trailers up to an empty line. */
struct chunked {
	enum { SIZE, DATA, DATA_END, TRAILER, DONE } state;
	char line[32];
	size_t nline;
	uint64_t left;
};

/* Feeds n bytes; the data goes to sink. Returns 0, or -EPROTO. */
static int unchunk(struct chunked *k, const char *p, size_t n, const struct ctl_stream *sink)
{
	while (n && k->state != DONE) {
		if (k->state == DATA) {
			size_t take = n < k->left ? n : (size_t)k->left;
			int r = sink->write(sink->arg, p, take);

			if (r < 0)
				return r;
			p += take;
			n -= take;
			if (!(k->left -= take))
				k->state = DATA_END;
			continue;
		}
		/* A line: a chunk's size, the CRLF after its data, a trailer. */
		if (*p != '\n') {
			if (k->nline == sizeof(k->line) - 1)
				return -EPROTO;
			k->line[k->nline++] = *p++;
			n--;
			continue;
		}
		p++;
		n--;
		k->line[k->nline] = '\0';
		if (k->nline && k->line[k->nline - 1] == '\r')
			k->line[--k->nline] = '\0';
		if (k->state == SIZE) {
			char *end;

			errno = 0;
			k->left = strtoull(k->line, &end, 16);
			if (end == k->line || errno || (*end && *end != ';'))
				return -EPROTO;
			k->state = k->left ? DATA : TRAILER;
		} else if (k->state == DATA_END) {
			if (k->nline)
				return -EPROTO;
			k->state = SIZE;
		} else if (!k->nline) {
			k->state = DONE;
		}
		k->nline = 0;
	}
	return 0;
}

int ctl_http_stream(const char *socket_path, double timeout, const char *method, const char *path,
		    const char *body, struct ctl_response *res, const struct ctl_stream *sink)
{
	double deadline = ctl_now_s() + timeout;
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap), *end = NULL;
	struct chunked k = {0};
	bool chunked = false;
	int fd, r = 0;

	memset(res, 0, sizeof(*res));
	if (!buf)
		return -ENOMEM;
	fd = send_request(socket_path, deadline, method, path, body);
	if (fd < 0) {
		free(buf);
		return fd;
	}
	/* The headers, within the deadline. */
	while (!end) {
		ssize_t n;

		if (len == cap - 1) {
			r = -EPROTO; /* 16 KiB of headers */
			goto out;
		}
		n = recv(fd, buf + len, cap - len - 1, 0);
		if (n > 0) {
			len += (size_t)n;
			buf[len] = '\0';
			end = strstr(buf, "\r\n\r\n");
		} else if (n == 0) {
			r = -EPROTO;
			goto out;
		} else if (errno != EINTR && errno != EAGAIN) {
			r = -errno;
			goto out;
		} else if ((r = wait_fd(fd, POLLIN, deadline)) < 0) {
			goto out;
		}
	}
	if (sscanf(buf, "HTTP/1.%*1[01] %3d", &res->status) != 1) {
		r = -EPROTO;
		goto out;
	}
	if (res->status != 200) {
		/* An error document: the rest read whole, as any answer. */
		char *rest = NULL, *all;
		size_t rlen = 0;

		r = recv_all(fd, &rest, &rlen, deadline);
		if (r < 0)
			goto out;
		all = realloc(buf, len + rlen + 1);
		if (!all) {
			free(rest);
			r = -ENOMEM;
			goto out;
		}
		buf = all;
		memcpy(buf + len, rest, rlen + 1);
		free(rest);
		r = parse_response(buf, len + rlen, res);
		goto out;
	}
	for (char *line = strstr(buf, "\r\n"); line && line < end; line = strstr(line, "\r\n")) {
		line += 2;
		if (!strncasecmp(line, "Transfer-Encoding:", 18))
			chunked = strstr(line, "chunked") && strstr(line, "chunked") < end;
	}
	/* The body as it comes, with no deadline: the window lasts what it lasts. */
	res->streamed = true;
	for (size_t off = (size_t)(end + 4 - buf), n = len - off;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t got;

		if (n) {
			r = chunked ? unchunk(&k, buf + off, n, sink)
				    : sink->write(sink->arg, buf + off, n);
			if (r < 0 || k.state == DONE)
				break;
		}
		off = n = 0;
		if (sink->tick)
			sink->tick(sink->arg);
		if (poll(&pfd, 1, 250) == 0)
			continue;
		got = recv(fd, buf, cap, 0);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0) {
			r = got < 0 ? -errno : 0;
			break;
		}
		n = (size_t)got;
	}
	res->complete = chunked ? k.state == DONE : r == 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return r;
}

void ctl_response_free(struct ctl_response *res)
{
	free(res->body);
	res->body = NULL;
	res->len = 0;
}
