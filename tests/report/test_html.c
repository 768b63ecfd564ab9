/*
 * Tests for src/report/html.c and page.c's helpers: escaping (markup,
 * quotes, invalid UTF-8, control bytes, cutting on a character boundary),
 * the fixed number formats, the colour scales' ends and text contrast,
 * the axes, and the command line's redaction of secrets.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "report/report.h"
#include "report/report_int.h"

static char *esc(const char *s, size_t max)
{
    struct buf b;
    buf_init(&b, 0);
    html_esc(&b, s, max);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

static void test_escape_markup_and_quotes(void **state)
{
    (void)state;
    char *s = esc("<script>alert(1)</script>\"><img src=x onerror='x'>&", 0);
    assert_string_equal(s, "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;"
                           "&lt;img src=x onerror=&#39;x&#39;&gt;&amp;");
    free(s);
    s = esc("</svg><!-- -->", 0);
    assert_null(strchr(s, '<'));
    assert_null(strchr(s, '>'));
    free(s);
}

static void test_escape_invalid_utf8_and_controls(void **state)
{
    (void)state;
    /* a lone continuation byte, an overlong '<' (0xc0 0xbc), a NUL-free
     * control, a surrogate; tab and newline stay */
    char *s = esc("a\x80"
                  "b\xc0\xbc"
                  "c\x01\t\n\xed\xa0\x80"
                  "d",
                  0);
    assert_string_equal(s, "a\xef\xbf\xbd"
                           "b\xef\xbf\xbd\xef\xbf\xbd"
                           "c\xef\xbf\xbd\t\n\xef\xbf\xbd\xef\xbf\xbd"
                           "\xef\xbf\xbd"
                           "d");
    free(s);
    s = esc("caf\xc3\xa9 \xe2\x9c\x93", 0);
    assert_string_equal(s, "caf\xc3\xa9 \xe2\x9c\x93");
    free(s);
}

static void test_escape_cut_on_character(void **state)
{
    (void)state;
    char *s = esc("ab\xc3\xa9z", 3); /* the cut falls inside the e-acute */
    assert_string_equal(s, "ab\xe2\x80\xa6");
    free(s);
    s = esc("abc", 3);
    assert_string_equal(s, "abc");
    free(s);
}

static void test_escape_json_values(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 0);
    json_t *j = json_pack("{s:s, s:i}", "k", "</svg>", "a", 1);
    html_esc_json(&b, j, 0);
    buf_addch(&b, '|');
    html_esc_json(&b, NULL, 0);
    buf_addch(&b, '\0');
    assert_string_equal(b.data, "{&quot;a&quot;:1,&quot;k&quot;:&quot;&lt;"
                                "/svg&gt;&quot;}|-");
    json_decref(j);
    buf_release(&b);
}

static void test_number_formats(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 0);
    html_fmt_fixed(&b, NAN, 1);
    buf_addch(&b, ' ');
    html_fmt_fixed(&b, -0.0001, 1);
    buf_addch(&b, ' ');
    html_fmt_sig(&b, 0.000123456);
    buf_addch(&b, ' ');
    html_fmt_tokens(&b, 8192);
    buf_addch(&b, ' ');
    html_fmt_tokens(&b, 1500);
    buf_addch(&b, ' ');
    html_fmt_time(&b, 0);
    buf_addch(&b, '\0');
    assert_string_equal(b.data, "- -0.0 0.000123 8k 1500 1970-01-01 "
                                "00:00:00 UTC");
    buf_release(&b);
}

static void test_colour_scales(void **state)
{
    (void)state;
    char c[8];
    bool dark;
    html_color_seq(0, c, &dark);
    assert_string_equal(c, "#440154");
    assert_true(dark);
    html_color_seq(1, c, &dark);
    assert_string_equal(c, "#fde725");
    assert_false(dark);
    html_color_seq(NAN, c, &dark);
    assert_string_equal(c, "#440154");
    html_color_div(0, c, &dark);
    assert_string_equal(c, "#f7f7f7");
    assert_false(dark);
    html_color_div(-1, c, &dark);
    assert_string_equal(c, "#b35806");
    html_color_div(1, c, &dark);
    assert_string_equal(c, "#542788");
    assert_true(dark);
}

static void test_axes(void **state)
{
    (void)state;
    struct axis a = {.lo = 10, .hi = 10000, .p0 = 0, .p1 = 300, .log = true};
    assert_true(fabs(html_axis_map(&a, 100) - 100) < 1e-9);
    assert_true(fabs(html_axis_map(&a, 0) - 0) < 1e-9); /* clamped to lo */
    double t[16];
    assert_int_equal(html_axis_ticks(&a, t, 16), 4);
    assert_true(t[0] == 10 && t[3] == 10000);
    struct axis l = {.lo = 0, .hi = 1, .p0 = 200, .p1 = 0};
    assert_true(fabs(html_axis_map(&l, 0.5) - 100) < 1e-9);
    size_t n = html_axis_ticks(&l, t, 16);
    assert_true(n >= 4 && n <= 9);
    assert_true(t[0] == 0);
}

static void test_cmdline_redacts_secrets(void **state)
{
    (void)state;
    static char a[13][40] = {"probe",
                             "--endpoint",
                             "http://user:pw@host:8000/v1",
                             "--api-key",
                             "sk-secret",
                             "--header",
                             "Authorization: Bearer abc",
                             "--golden-api-key=sk-2",
                             "--max-tokens",
                             "256",
                             "--hf-token",
                             "hf_x",
                             "it's"};
    char *argv[13];
    for (int i = 0; i < 13; i++)
        argv[i] = a[i];
    char *s = report_cmdline(13, argv);
    assert_string_equal(s,
                        "fidelity probe --endpoint 'http://***@host:8000/v1' "
                        "--api-key *** --header *** --golden-api-key=*** "
                        "--max-tokens 256 --hf-token *** 'it'\\''s'");
    assert_null(strstr(s, "secret"));
    assert_null(strstr(s, "abc"));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_markup_and_quotes),
        cmocka_unit_test(test_escape_invalid_utf8_and_controls),
        cmocka_unit_test(test_escape_cut_on_character),
        cmocka_unit_test(test_escape_json_values),
        cmocka_unit_test(test_number_formats),
        cmocka_unit_test(test_colour_scales),
        cmocka_unit_test(test_axes),
        cmocka_unit_test(test_cmdline_redacts_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
