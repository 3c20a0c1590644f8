// How many clusters of 1, 2 and 3 CTAs the GPU holds at once with the SM90 paged-MQA kernel's footprint
// (640 threads, one CTA per SM, the dynamic shared memory of next_n 2 per CTA at 64 and 32 heads).
// Build and run on the GPU box:  nvcc -arch=sm_90a -o /tmp/mac max_active_clusters.cu && /tmp/mac
// A 3-CTA cluster whose count is below num_sms / 3 leaves clusters of a num_sms / 3 schedule to a second wave.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(640, 1) footprint(int* out) {
    extern __shared__ int smem[];
    if (out != nullptr) out[blockIdx.x] = smem[threadIdx.x];
}

int main() {
    int device = 0, num_sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
    printf("{\"num_sms\": %d, \"rows\": [", num_sms);
    const int smem_sizes[] = {168004, 143428};  // next_n 2 layout per CTA: 64 heads, 32 heads (host formula)
    const char* sep = "";
    for (int smem : smem_sizes) {
        cudaFuncSetAttribute(footprint, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        for (int cluster = 1; cluster <= 4; ++ cluster) {
            cudaLaunchConfig_t config = {};
            cudaLaunchAttribute attr;
            attr.id = cudaLaunchAttributeClusterDimension;
            attr.val.clusterDim.x = cluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
            config.gridDim = dim3((num_sms / cluster) * cluster);
            config.blockDim = dim3(640);
            config.dynamicSmemBytes = smem;
            config.attrs = &attr;
            config.numAttrs = 1;
            int max_clusters = -1;
            const cudaError_t error = cudaOccupancyMaxActiveClusters(&max_clusters, footprint, &config);
            printf("%s{\"smem\": %d, \"cluster\": %d, \"max_active_clusters\": %d, \"num_sms_div_cluster\": %d, \"error\": \"%s\"}",
                   sep, smem, cluster, max_clusters, num_sms / cluster, cudaGetErrorString(error));
            sep = ", ";
        }
    }
    printf("]}\n");
    return 0;
}
