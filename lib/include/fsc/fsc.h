/* fsc: sharded, pipelined and tensor-parallel training for C programs. Include this header. */
#ifndef FSC_H
#define FSC_H
#include "version.h"
#include "status.h"
#include "dtype.h"
#include "tensor.h"
#include "rng.h"
#include "device.h"
#include "comm.h"
#include "cluster.h"
#include "launch.h"
#include "safetensors.h"
#include "optim.h"
#include "gpt.h"
#include "nn.h"
#include "checkpoint_wrapper.h"
#include "parallel.h"
#include "tp.h"
#include "moe.h"
#include "ckpt.h"
#endif
