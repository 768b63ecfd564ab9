/*
 * method: evhttp's request-method enum as the HTTP method token that
 * goes on the wire and in the store.
 */
#ifndef HTTP_METHOD_H
#define HTTP_METHOD_H

#include <event2/http.h>

/* "GET", "POST", ...: every method evhttp 2.1 parses has its case. */
const char *http_method_name(enum evhttp_cmd_type t);

#endif
