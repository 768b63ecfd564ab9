/*
 * plural: the word that goes with a count in a message, so output reads
 * "1 reply said" and "2 replies said", "1 case" and "3 cases". Pure, no
 * I/O; for every printf-like format that puts a count before a noun.
 */
#ifndef CORE_PLURAL_H
#define CORE_PLURAL_H

/* one when n is 1, else many: "%u %s said", n, plural(n, "reply",
 * "replies"). */
static inline const char *plural(unsigned long long n, const char *one,
                                 const char *many)
{
    return n == 1 ? one : many;
}

/* "s" unless n is 1, for nouns that only add an s: "%zu case%s". */
static inline const char *plural_s(unsigned long long n)
{
    return n == 1 ? "" : "s";
}

#endif
