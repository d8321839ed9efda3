-- Named thresholds used by the table SQL below (read with getvariable('name')); units in the names.

-- a rank's last step shorter than this share of its shortest other step was cut short by the profiler
SET VARIABLE cut_short_max_ratio = 0.1;
-- gaps shorter than this between forward (or backward) ops are Python overhead, not another phase
SET VARIABLE phase_merge_tolerance_ns = 1000000;
-- a GPU idle gap is caused by the DataLoader wait when the wait covers at least this share of it
SET VARIABLE gap_data_wait_min_share_pct = 50;
-- a GPU idle gap is caused by waiting for communication when the loop is blocked in a host-run collective or send / recv for at least this share of it
SET VARIABLE gap_comm_wait_min_share_pct = 50;
-- a rank's lateness in a step starts at the first collective where it is late by at least this share of the most it is late in the step
SET VARIABLE lateness_start_share_pct = 50;
