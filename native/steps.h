/* What steps.c offers the module: the StepRecorder type. Include after <Python.h>. */
#ifndef FLAMEPROF_STEPS_H
#define FLAMEPROF_STEPS_H

/* Add flameprof._native.StepRecorder to ``module``: 0, or -1 with an exception set. */
int flameprof_add_step_recorder(PyObject *module);

#endif
