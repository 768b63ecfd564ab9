/*
 * sse_streams: crafted SSE streams for the tests of a stream's reply
 * (tests/store/test_replytext.c, test_replycol.c): content with usage and
 * [DONE]; reasoning under "reasoning" with escapes and no [DONE]; parallel
 * tool calls merged by index; an error event and chunks that are not JSON;
 * /v1/completions text with odd numbers in usage; a NUL escape and
 * reasoning_content; CRLF line ends; nothing; a comment alone.
 */
#ifndef TESTS_UTIL_SSE_STREAMS_H
#define TESTS_UTIL_SSE_STREAMS_H

#define SSE_STREAMS_N 9

extern const char *const sse_streams[SSE_STREAMS_N];

#endif
