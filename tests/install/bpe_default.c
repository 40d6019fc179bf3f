/* fsc_bpe_load_default in a program of one's own, built by ci/check_install.sh into a folder outside the installed
 * bin/ with an rpath to the installed libfsc.so and run from a folder without examples/data: the GPT-2 vocabulary is
 * found beside the library (PREFIX/share/fsc). The oracle: "Hello world" encodes to GPT-2's ids 15496, 995
 * (tiktoken's gpt2). */
#include <stdio.h>
#include <fsc/fsc.h>

int main(void) {
    fsc_bpe *b = NULL;
    int32_t ids[16];
    size_t n = 0;
    if (fsc_bpe_load_default(&b) != FSC_OK || fsc_bpe_encode(b, "Hello world", 11, ids, &n) != FSC_OK) {
        fprintf(stderr, "bpe_default: %s\n", fsc_last_error());
        fsc_bpe_free(b);
        return 1;
    }
    fsc_bpe_free(b);
    if (n != 2 || ids[0] != 15496 || ids[1] != 995) {
        fprintf(stderr, "bpe_default: \"Hello world\" gave %zu ids, not 15496, 995\n", n);
        return 1;
    }
    printf("bpe_default: the installed GPT-2 vocabulary found beside libfsc.so\n");
    return 0;
}
