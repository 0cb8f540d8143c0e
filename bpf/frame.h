/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * frame.h: the framing parser of response bodies, the kernel's copy of the
 * Go one (l7/http1/chunked.go): the same states, the same bytes move it, the
 * same bounds. Both datapaths' programs use it; each fetches the bytes its
 * own way and hands framing bytes to frame_byte, data runs to frame_skip.
 */
#ifndef LMW_FRAME_H
#define LMW_FRAME_H

#include "lmwarden.h"

#define F_MORE 0 /* the body goes on */
#define F_END 1  /* this byte was its last */
#define F_BAD 2  /* this byte breaks the framing */

static __always_inline int frame_hex(__u8 c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* frame_tchar: an RFC 9110 token character, from two 64-bit masks (no
 * table lookup: a variable index into a map needs more privilege). */
static __always_inline int frame_tchar(__u8 c)
{
	if (c < 64)
		return (0x03ff6cfa00000000ULL >> c) & 1;
	if (c < 128)
		return (0x57ffffffc7fffffeULL >> (c - 64)) & 1;
	return 0;
}

/* a control byte other than HTAB, DEL included */
static __always_inline int frame_ctl(__u8 c)
{
	return (c < ' ' && c != '\t') || c == 0x7f;
}

static __always_inline int frame_fail(struct frame *f)
{
	f->phase = FR_ERROR;
	return F_BAD;
}

/* frame_data reports whether the next bytes are a run frame_skip takes. */
static __always_inline int frame_data(const struct frame *f)
{
	return f->phase == FR_CHUNK_DATA || f->phase == FR_LENGTH;
}

/* frame_skip consumes up to avail bytes of a data run and returns how many
 * (a Content-Length body ends with its last one). */
static __always_inline __u64 frame_skip(struct frame *f, __u64 avail)
{
	__u64 n = f->remaining < avail ? f->remaining : avail;

	f->remaining -= n;
	if (f->remaining == 0)
		f->phase = f->phase == FR_LENGTH ? FR_DONE : FR_CHUNK_DATA_CR;
	return n;
}

/* frame_byte moves f over one framing byte (http1.ChunkedBody.step). */
static __always_inline int frame_byte(struct frame *f, __u8 c)
{
	__u32 ph = f->phase;
	int h;

	if (ph == FR_DONE)
		return F_END;
	if (ph > FR_DONE) /* FR_ERROR, or not a phase this takes bytes in */
		return F_BAD;
	f->line++;
	if (f->line > LMW_MAX_LINE)
		return frame_fail(f);
	if (ph >= FR_TRAILER) {
		f->count++;
		if (f->count > LMW_MAX_TRAILERS)
			return frame_fail(f);
	}
	switch (ph) {
	case FR_CHUNK_SIZE:
		h = frame_hex(c);
		if (h >= 0) {
			if (f->count == 15)
				return frame_fail(f);
			f->count++;
			f->size = (f->size << 4) | h;
		} else if (f->count == 0) {
			return frame_fail(f);
		} else if (c == ';') {
			f->phase = FR_CHUNK_EXT;
		} else if (c == ' ' || c == '\t') {
			f->phase = FR_CHUNK_SIZE_BWS;
		} else if (c == '\r') {
			f->phase = FR_CHUNK_SIZE_LF;
		} else {
			return frame_fail(f);
		}
		break;
	case FR_CHUNK_SIZE_BWS:
		if (c == ';')
			f->phase = FR_CHUNK_EXT;
		else if (c != ' ' && c != '\t')
			return frame_fail(f);
		break;
	case FR_CHUNK_EXT:
		if (c == '\r')
			f->phase = FR_CHUNK_SIZE_LF;
		else if (frame_ctl(c))
			return frame_fail(f);
		break;
	case FR_CHUNK_SIZE_LF:
		if (c != '\n')
			return frame_fail(f);
		if (f->size == 0) {
			f->phase = FR_TRAILER;
			f->count = f->line;
			f->line = 0;
			return F_MORE;
		}
		f->phase = FR_CHUNK_DATA;
		f->remaining = f->size;
		f->line = 0;
		break;
	case FR_CHUNK_DATA_CR:
		if (c != '\r')
			return frame_fail(f);
		f->phase = FR_CHUNK_DATA_LF;
		break;
	case FR_CHUNK_DATA_LF:
		if (c != '\n')
			return frame_fail(f);
		f->phase = FR_CHUNK_SIZE;
		f->remaining = 0;
		f->size = 0;
		f->line = 0;
		f->count = 0;
		break;
	case FR_TRAILER:
		if (c == '\r')
			f->phase = FR_FINAL_LF;
		else if (frame_tchar(c))
			f->phase = FR_TRAILER_NAME;
		else
			return frame_fail(f);
		break;
	case FR_TRAILER_NAME:
		if (c == ':')
			f->phase = FR_TRAILER_VALUE;
		else if (!frame_tchar(c))
			return frame_fail(f);
		break;
	case FR_TRAILER_VALUE:
		if (c == '\r')
			f->phase = FR_TRAILER_LF;
		else if (frame_ctl(c))
			return frame_fail(f);
		break;
	case FR_TRAILER_LF:
		if (c != '\n')
			return frame_fail(f);
		f->phase = FR_TRAILER;
		f->line = 0;
		break;
	case FR_FINAL_LF:
		if (c != '\n')
			return frame_fail(f);
		f->phase = FR_DONE;
		return F_END;
	default: /* FR_CHUNK_DATA: frame_skip's */
		return frame_fail(f);
	}
	return F_MORE;
}

#endif /* LMW_FRAME_H */
