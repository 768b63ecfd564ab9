/*
 * sse_streams: crafted SSE streams of every shape a reply is read from
 * (tests/util/sse_streams.h).
 */
#include "util/sse_streams.h"

#include <stddef.h>

const char *const sse_streams[SSE_STREAMS_N] = {
    /* content, usage, [DONE] */
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":"
    "\"The \"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"value "
    "is 5.\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":"
    "\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":19,"
    "\"completion_tokens\":8,\"total_tokens\":27}}\n\ndata: [DONE]\n\n",
    /* reasoning under "reasoning", escapes and non-ASCII, no [DONE] */
    "data: {\"choices\":[{\"delta\":{\"reasoning\":\"think \\\"a\\\"\\n\"}}"
    "]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning\":\"\\u00e9\\u2028"
    "\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"\\t<b>\\/\"}"
    "}]}\n\n",
    /* parallel tool calls merged by index */
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
    "\"c0\",\"type\":\"function\",\"function\":{\"name\":\"task\","
    "\"arguments\":\"{\\\"pr\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{"
    "\"tool_calls\":[{\"index\":1,\"id\":\"c1\",\"function\":{\"name\":"
    "\"read\",\"arguments\":\"{}\"}},{\"index\":0,\"function\":{"
    "\"arguments\":\"ompt\\\":\\\"x\\\"}\"}}]}}]}\n\ndata: {\"choices\":[{"
    "\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    /* an error event and chunks that are not JSON */
    "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: "
    "not json\n\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":"
    "503}}\n\ndata: [1,2\n\n",
    /* /v1/completions text, a real and a big integer in usage */
    "data: {\"choices\":[{\"text\":\"once\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"text\":\" upon\",\"finish_reason\":\"length\""
    "}],\"usage\":{\"a\":1.5e3,\"b\":12345678901234567,\"c\":-0.0}}\n\n",
    /* a NUL escape in content, reasoning_content, an empty content */
    "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"r\","
    "\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":"
    "\"x\\u0000y\"}}]}\n\n",
    /* CRLF line ends, a blank line first (dispatches nothing) */
    "\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"crlf\"}}]}\r\n\r\n"
    "data: [DONE]\r\n\r\n",
    /* nothing */
    "",
    ": comment only\n\n",
};
