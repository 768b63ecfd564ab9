/*
 * method: evhttp's request-method enum as the HTTP method token that
 * goes on the wire and in the store.
 */
#ifndef SIM_METHOD_H
#define SIM_METHOD_H

#include <event2/http.h>

/* "GET", "POST", ...: every method evhttp 2.1 parses has its case. */
const char *sim_method_name(enum evhttp_cmd_type t);

#endif
