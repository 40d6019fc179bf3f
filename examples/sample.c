/* sample: generate tokens from a model file the trainer saved (--save). Work in progress: the options and the
 * generation land in the next commits (issue 13). */
#include <stdio.h>

int main(void) {
    fprintf(stderr, "sample: not implemented yet\n");
    return 2;
}
