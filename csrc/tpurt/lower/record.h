/* record.h — debug recording of executed graphs (internal side of tpurt.h tpu_debug_*).
 * tpu_op_run: if tpu_record_enabled(), r = tpu_record_begin(...) at bind time (prints the
 * StableHLO, copies the scalar values); the task calls tpu_record_inputs before the run and
 * tpu_record_finish after it (which queues r for tpu_debug_take_graph). */
#ifndef TPURT_LOWER_RECORD_H_
#define TPURT_LOWER_RECORD_H_

#include "drivers/host/host.h"

int tpu_record_enabled(void);
tpu_debug_graph_t* tpu_record_begin(const char* op_name, const tpu_ir_graph_t* g, const tpu_host_scalar_t* scalars);
void tpu_record_inputs(tpu_debug_graph_t* r, const tpu_host_view_t* params, int np);
void tpu_record_finish(tpu_debug_graph_t* r, const tpu_host_view_t* outs, int nout, tpu_status_t run_status);

#endif /* TPURT_LOWER_RECORD_H_ */
