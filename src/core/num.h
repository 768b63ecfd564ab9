/*
 * num: strict parsing of whole and real numbers from text (the whole string
 * must be the number, within [min, max]). Returns 0 or -EINVAL.
 */
#ifndef CORE_NUM_H
#define CORE_NUM_H

int num_parse_long(const char *s, long min, long max, long *out);
int num_parse_double(const char *s, double min, double max, double *out);

#endif
