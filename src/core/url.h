/*
 * url: URLs as they may be shown. Every place that prints, stores or
 * renders a URL the user gave (drift's text, JSON and drift_runs, probe's
 * probe_endpoint, the readiness line, the report's command line) masks it
 * with url_mask first, so a user:password@ (or a token@) never leaves the
 * process through fidelity's output. One rule, any scheme (http, https,
 * postgres, ...) or none.
 */
#ifndef CORE_URL_H
#define CORE_URL_H

#include <stddef.h>

/*
 * s with its userinfo replaced by "***"; fresh, the caller frees it.
 * The authority is what follows the first "://" (or, with none, the start
 * of s) up to the first '/', '?' or '#'; when it holds an '@', everything
 * before the last '@' of it (user, password, token: the whole userinfo,
 * even when the password itself holds an '@') becomes three asterisks, so
 * https://u:pw@host:8000/v1 is shown as https://(***)@host:8000/v1 without
 * the parentheses. An '@' in the path, query or fragment is left alone; s
 * without a userinfo is copied as it is.
 */
char *url_mask(const char *s);
/* text (a string in a buffer of size bytes) with the first occurrence of
 * url in it replaced by url_mask(url), cut to fit; for error messages that
 * quote the URL they failed on (curl's do). */
void url_mask_in(char *text, size_t size, const char *url);

#endif
