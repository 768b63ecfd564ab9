/*
 * The one-node test cluster of util/slurm: it starts, runs a batch job
 * to completion, and stops leaving none of its daemons.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/slurm.h"

static struct slurm_cluster cl;

static int teardown(void **state)
{
    (void)state;
    slurm_cluster_stop(&cl);
    return 0;
}

static void test_cluster_runs_a_batch_job(void **state)
{
    (void)state;
    slurm_need();
    struct buf why = BUF_INIT;
    if (slurm_cluster_start(&cl, &why))
        fail_msg("%s", buf_str(&why));
    buf_release(&why);
    char cmd[512], out_path[160];
    snprintf(out_path, sizeof(out_path), "%s/job.out", cl.dir);
    snprintf(cmd, sizeof(cmd),
             "sbatch --parsable -J fidelity-test-job -o '%s' "
             "--wrap 'echo ran on $SLURM_JOB_NODELIST'",
             out_path);
    struct buf out = BUF_INIT;
    assert_int_equal(slurm_sh(cmd, &out, 10), 0);
    int found = 0;
    for (int i = 0; i < 200 && !found; i++) {
        FILE *f = fopen(out_path, "r");
        char line[128] = "";
        if (f) {
            found = fgets(line, sizeof(line), f) && strstr(line, cl.node);
            fclose(f);
        }
        if (!found)
            usleep(100000);
    }
    assert_true(found);
    buf_release(&out);
    pid_t d[3] = {cl.munged, cl.slurmctld, cl.slurmd};
    slurm_cluster_stop(&cl);
    for (int i = 0; i < 3; i++)
        assert_true(kill(d[i], 0) != 0);
    assert_null(getenv("SLURM_CONF"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_cluster_runs_a_batch_job, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
