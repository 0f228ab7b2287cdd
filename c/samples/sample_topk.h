/* sample_topk.h: the k best scores of a classifier's output, best first, kept by insertion
 * as the samples scan the scores in class order (of equal scores the later class ranks
 * first, as a min-heap of (score, class) pairs keeps them). */
#ifndef SAMPLE_TOPK_H_
#define SAMPLE_TOPK_H_

#include <string.h>

typedef struct {
  int id;
  double score;
} Classification;

/* Offer class `id` with `score` to the best `top_k` so far (`*kept` of them in `top`). */
static inline void topk_insert(Classification *top, int *kept, int top_k, int id,
                               double score) {
  int at = *kept < top_k ? *kept : top_k;
  while (at > 0 && top[at - 1].score <= score) --at;
  if (at >= top_k) return;
  int last = *kept < top_k ? *kept : top_k - 1;
  memmove(&top[at + 1], &top[at], (size_t)(last - at) * sizeof *top);
  top[at].id = id;
  top[at].score = score;
  if (*kept < top_k) ++*kept;
}

#endif /* SAMPLE_TOPK_H_ */
