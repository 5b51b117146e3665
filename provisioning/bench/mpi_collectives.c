/*
 * The Open MPI reference for labctl's collectives: the same operations, on
 * the same nodes, at the same sizes, timed and checked the same way.
 *
 * Each operation: the output poisoned (all-ones bytes, a NaN), MPI_Barrier,
 * the operation timed on each rank, then every element of the rank's result
 * checked against the closed form of rdma-agent's inputs (element e of rank
 * r: a small integer from (seed, e) plus 7 r, as float32, so every sum is
 * exact). Neither the barrier nor the check is timed. The operation's time
 * is the slowest rank's mean (MPI_MAX over the ranks' means), as nccl-tests
 * and labctl report it.
 *
 *   mpi_collectives COLLECTIVE SIZE_BYTES ITERATIONS WARMUP SEED
 *
 * COLLECTIVE: allreduce | allgather | reduce-scatter | reduce | alltoall | broadcast
 * (reduce and broadcast with rank 0 as the root).
 * Rank 0 prints one line of JSON:
 *   {"collective":"allreduce","world":4,"size":1048576,"iterations":5,
 *    "time_us":...,"wrong":0,"checked":...}
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float input_value(uint64_t seed, int rank, uint64_t e) {
    uint64_t z = seed ^ (e * 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((z % 251) + 7 * (uint64_t)rank);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 6) {
        if (rank == 0) fprintf(stderr, "usage: %s COLLECTIVE SIZE_BYTES ITERATIONS WARMUP SEED\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *op = argv[1];
    uint64_t count = strtoull(argv[2], NULL, 10) / 4;
    long iterations = atol(argv[3]), warmup = atol(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10);
    int allreduce = !strcmp(op, "allreduce"), allgather = !strcmp(op, "allgather"),
        reduce_scatter = !strcmp(op, "reduce-scatter"), alltoall = !strcmp(op, "alltoall"),
        reduce = !strcmp(op, "reduce"), broadcast = !strcmp(op, "broadcast");
    if (!(allreduce || allgather || reduce_scatter || reduce || alltoall || broadcast)) {
        if (rank == 0) fprintf(stderr, "unknown collective %s\n", op);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (alltoall) count = count / world * world;
    /* MPI_Reduce_scatter_block and MPI_Allgather need equal blocks. */
    if (allgather || reduce_scatter) count = count / world * world;
    uint64_t block = count / world;
    float *in = malloc(count * 4 + 4), *out = malloc(count * 4 + 4);
    for (uint64_t e = 0; e < count; e++) in[e] = input_value(seed, rank, e);
    double total = 0;
    uint64_t wrong = 0, checked = 0;
    for (long k = 0; k < warmup + iterations; k++) {
        memset(out, 0xFF, count * 4);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (allreduce) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (allgather) MPI_Allgather(in + rank * block, (int)block, MPI_FLOAT, out, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
        else if (reduce_scatter) MPI_Reduce_scatter_block(in, out + rank * block, (int)block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (reduce) MPI_Reduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        else if (alltoall) MPI_Alltoall(in, (int)block, MPI_FLOAT, out, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
        else {
            if (rank == 0) memcpy(out, in, count * 4);
            MPI_Bcast(out, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        }
        double took = MPI_Wtime() - t0;
        if (k >= warmup) total += took;
        /* reduce-scatter's rank holds its block; reduce's root (rank 0) the result, the others nothing. */
        uint64_t from = reduce_scatter ? rank * block : 0,
                 to = reduce_scatter ? (rank + 1) * block : (reduce && rank != 0) ? 0 : count;
        for (uint64_t e = from; e < to; e++) {
            float want;
            if (allreduce || reduce_scatter || reduce) {
                uint32_t s = 0;
                for (int q = 0; q < world; q++) s += (uint32_t)input_value(seed, q, e);
                want = (float)s;
            } else if (allgather) want = input_value(seed, (int)(e / block), e);
            else if (alltoall) want = input_value(seed, (int)(e / block), rank * block + e % block);
            else want = input_value(seed, 0, e);
            checked++;
            if (memcmp(&want, &out[e], 4)) wrong++;
        }
    }
    double mean = iterations > 0 ? total / iterations : 0, slowest;
    uint64_t all_wrong, all_checked;
    MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&checked, &all_checked, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"collective\":\"%s\",\"world\":%d,\"size\":%llu,\"iterations\":%ld,\"time_us\":%.3f,"
               "\"wrong\":%llu,\"checked\":%llu}\n",
               op, world, (unsigned long long)(count * 4), iterations, slowest * 1e6,
               (unsigned long long)all_wrong, (unsigned long long)all_checked);
    free(in);
    free(out);
    MPI_Finalize();
    return all_wrong ? 1 : 0;
}
